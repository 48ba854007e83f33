"""Exercises for notebook 08: watching attention learn.

1. read the training record: the step at which each output position locks onto its source;
2. spot the bug: checkpoints that are views of the live parameters, so every one shows the final weights.
"""

from __future__ import annotations

import torch

from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, no_loops

__all__ = ["lock_steps", "checkpoint_copies"]


# --- 1. the step at which each row locks ------------------------------------------------------------------------
def _curves_cases(g: torch.Generator) -> list[Case]:
    def curves(num_checkpoints, num_tokens, every):
        # Rising curves from about 1/T towards 1, each with its own start, plus some noise.
        steps = torch.arange(num_checkpoints) * every
        starts = torch.randint(1, num_checkpoints - 2, (num_tokens,), generator=g)
        rise = torch.sigmoid((torch.arange(num_checkpoints).unsqueeze(1) - starts) * 1.5)   # (S, T)
        row_weights = (0.12 + 0.86 * rise + 0.03 * randn(g, num_checkpoints, num_tokens)).clamp(0.0, 1.0)
        row_weights[row_weights.sub(0.5).abs() < 1e-3] = 0.52   # no value sits exactly on the threshold
        return row_weights, steps
    row_weights, steps = curves(12, 6, 4)
    row_weights[:, 0] = torch.tensor([0.12, 0.2, 0.55, 0.62, 0.45, 0.4, 0.58, 0.7, 0.8, 0.9, 0.95, 0.97])  # dips
    row_weights[:, 1] = torch.linspace(0.1, 0.4, 12)   # never gets there
    dips = Case("12 checkpoints every 4 steps, 6 rows, one row that dips below 0.5 again, one that never locks",
                (row_weights, steps))
    row_weights, steps = curves(26, 8, 4)
    smooth = Case("26 checkpoints every 4 steps, 8 rows", (row_weights, steps))
    row_weights, steps = curves(9, 5, 10)
    row_weights[:, 2] = 0.9    # locked from the start
    row_weights[:, 4] = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.45, 0.48, 0.49, 0.6, 0.3])   # lost at the end
    early = Case("9 checkpoints every 10 steps, 5 rows, one locked from step 0, one that falls at the end",
                 (row_weights, steps))
    row_weights, _ = curves(7, 4, 1)
    row_weights[:, 3] = torch.tensor([0.7, 0.8, 0.9, 0.4, 0.6, 0.7, 0.9])   # locked early, dips, locks again
    irregular = Case("7 checkpoints at the irregular steps 5, 6, 9, 20, 21, 50, 64 (none at 0), 4 rows",
                     (row_weights, torch.tensor([5, 6, 9, 20, 21, 50, 64])))
    # The threshold itself: a weight of exactly 0.5 is not above 0.5 (0.5 is exact in float32).
    row_weights, steps = curves(8, 4, 5)
    row_weights[:, 0] = torch.tensor([0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])    # on 0.5, then above
    row_weights[:, 1] = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.45, 0.48, 0.49, 0.5])  # ends on 0.5: never locked
    row_weights[:, 2] = torch.tensor([0.6, 0.7, 0.8, 0.5, 0.7, 0.8, 0.9, 0.9])     # dips onto 0.5 and back up
    on_the_line = Case("8 checkpoints every 5 steps, 4 rows, three of which sit exactly on 0.5 at some checkpoint",
                       (row_weights, steps))
    return [dips, smooth, early, irregular, on_the_line]


def _reference_lock_steps(row_weights, steps):
    result = []
    for row in range(row_weights.shape[1]):
        above = (row_weights[:, row] > 0.5).tolist()
        lock = -1
        for index in range(len(above) - 1, -1, -1):   # walk back from the end while the row stays above
            if not above[index]:
                break
            lock = int(steps[index])
        result.append(lock)
    return torch.tensor(result)


def _solution_lock_steps(row_weights, steps):
    above = row_weights > 0.5                                # (S, T): above the threshold at each checkpoint?
    stays = above.flip(0).cumprod(dim=0).flip(0).bool()     # (S, T): above here AND at every later checkpoint
    first = stays.int().argmax(dim=0)                        # (T,): the first checkpoint from which it stays
    return torch.where(stays[-1], steps[first], -1)          # rows not above at the end never locked


def _first_crossing(row_weights, steps):
    above = row_weights > 0.5
    return torch.where(above.any(dim=0), steps[above.int().argmax(dim=0)], -1)


def _at_or_above(row_weights, steps):
    stays = (row_weights >= 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return torch.where(stays[-1], steps[stays.int().argmax(dim=0)], -1)


def _indices_not_steps(row_weights, steps):
    stays = (row_weights > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return torch.where(stays[-1], stays.int().argmax(dim=0), -1)


def _no_minus_one(row_weights, steps):
    stays = (row_weights > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return steps[stays.int().argmax(dim=0)]


lock_steps = FunctionExercise(
    "The step at which each row locks",
    "write lock_steps(row_weights, steps): row_weights (num_checkpoints, num_tokens) holds one head's weight on the "
    "source of each output position at each checkpoint, steps (num_checkpoints,) the training step of each "
    "checkpoint. Return a tensor of shape (num_tokens,) (any integer or float dtype): for every output position, "
    "the training step from which its weight stays above 0.5 at every later checkpoint, or -1 if it is not above "
    "0.5 at the last checkpoint. No Python loop.",
    reference=_reference_lock_steps,
    cases=_curves_cases,
    hint=["Sketch a row whose weight goes 0.2, 0.6, 0.4, 0.7, 0.9. At which checkpoint does it lock, and what do "
          "you need to know about the checkpoints AFTER it to say so?",
          "'Above here and at every later checkpoint' is a question you can answer for all checkpoints at once if "
          "you run through them from the end backwards. Which cumulative operation stays True only as long as "
          "every value so far was True?"],
    solution=_solution_lock_steps,
    mistakes=[
        Mistake(_first_crossing,
                "you found the first checkpoint above 0.5. A row can cross 0.5 and fall back below it: it locks at "
                "the first checkpoint from which it STAYS above."),
        Mistake(_at_or_above,
                "you count a weight of exactly 0.5 as above 0.5. The task says above: a row that sits on 0.5 has not "
                "locked there (> rather than >=)."),
        Mistake(_indices_not_steps,
                "your numbers are checkpoint indices (0, 1, 2, ...), not training steps. Look the step up in "
                "`steps`."),
        Mistake(_no_minus_one,
                "a row that is not above 0.5 at the last checkpoint never locked: give it -1, not a step."),
    ],
    rules=[no_loops()],
)


# --- 2. spot the bug: checkpoints that share memory with the parameters ----------------------------------------
class _TrainingCase(Case):
    """A case whose inputs are a freshly built model and its training step: every call trains its own copy.

    ``args`` holds the recipe (so the case can be described and compared); ``fresh_args`` builds the model, an
    optimiser and a seeded batch generator from it, and returns ``(model, train_one_step, num_steps, every)``.
    """

    def fresh_args(self) -> tuple[tuple, dict]:
        from ..toy_model import AttentionOnlyModel
        task, d_model, num_heads, optimizer_class, lr, seed, num_steps, every = self.args
        with torch.random.fork_rng(devices=[]):   # building a model must not move the learner's random stream
            torch.manual_seed(seed)
            model = AttentionOnlyModel(task.vocab_size, task.num_tokens, d_model, num_heads)
        optimizer = optimizer_class(model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(seed)

        def train_one_step() -> float:
            train_one_step.calls += 1                                                # the checker counts the calls
            token_ids = task.sample(16, generator)                                   # (16, T): a fresh batch
            logits = model(token_ids)                                                # (16, T, vocab_size)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), task.targets(token_ids).flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()                                                         # changes every parameter in place
            return loss.item()

        train_one_step.calls = 0
        return (model, train_one_step, num_steps, every), {}

    def after_call(self, args: tuple, kwargs: dict) -> str | None:
        _, train_one_step, num_steps, every = args
        if train_one_step.calls != num_steps:
            return (f"your function called train_one_step() {train_one_step.calls} times, and the task says exactly "
                    f"num_steps = {num_steps} times. Training goes on after the last checkpoint when `every` does "
                    f"not divide `num_steps` (here every = {every}): the model after the call must be the one "
                    f"trained for num_steps steps.")
        return None


def _history_cases(g: torch.Generator) -> list[Case]:
    from ..toy_model import FetchTask
    return [
        _TrainingCase("the lesson's model (reversal of 8 tokens, d_model 32, 2 heads, Adam), 12 steps, a checkpoint "
                      "every 4", (FetchTask.reversal(8, 10), 32, 2, torch.optim.Adam, 0.01, 1, 12, 4)),
        _TrainingCase("rotation by 2 of 5 tokens, 6 letters, d_model 12, 3 heads, plain SGD, 10 steps, a checkpoint "
                      "every 3 (3 does not divide 10)",
                      (FetchTask.rotation(5, 2, 6), 12, 3, torch.optim.SGD, 1.0, 2, 10, 3)),
        _TrainingCase("reversal of 6 tokens, d_model 16, 1 head, Adam, 3 steps, a checkpoint after every step",
                      (FetchTask.reversal(6, 10), 16, 1, torch.optim.Adam, 0.05, 3, 3, 1)),
    ]


def _reference_history(model, train_one_step, num_steps, every):
    table = model.position_embedding.weight
    history = [table.detach().clone()]
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(table.detach().clone())
    return torch.stack(history)


def buggy_position_history(model, train_one_step, num_steps, every):
    # Keep the position table P (T, d_model) before the first step and after every `every`-th step of training.
    history = [model.position_embedding.weight.detach()]                   # step 0
    for step in range(1, num_steps + 1):
        train_one_step()                                                    # one optimiser step on every parameter
        if step % every == 0:
            history.append(model.position_embedding.weight.detach())
    return torch.stack(history)                                             # (num_checkpoints, T, d_model)


def _solution_position_history(model, train_one_step, num_steps, every):
    # .detach() alone is a view of the parameter's memory, which the optimiser overwrites at every step:
    # .clone() keeps the values as they are now.
    history = [model.position_embedding.weight.detach().clone()]           # step 0
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(model.position_embedding.weight.detach().clone())
    return torch.stack(history)                                             # (num_checkpoints, T, d_model)


def _first_copied_only(model, train_one_step, num_steps, every):
    history = [model.position_embedding.weight.detach().clone()]
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(model.position_embedding.weight.detach())
    return torch.stack(history)


def _no_step_zero(model, train_one_step, num_steps, every):
    history = []
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(model.position_embedding.weight.detach().clone())
    return torch.stack(history)


def _kept_before_the_step(model, train_one_step, num_steps, every):
    history = []
    for step in range(num_steps):
        if step % every == 0:
            history.append(model.position_embedding.weight.detach().clone())
        train_one_step()
    return torch.stack(history)


checkpoint_copies = SpotTheBug(
    "Spot the bug: every checkpoint shows the final weights",
    "position_history(model, train_one_step, num_steps, every) should watch the position table P of an "
    "AttentionOnlyModel being learned: keep model.position_embedding.weight, shape (T, d_model), before the first "
    "step (step 0) and after steps every, 2 * every, ... up to num_steps (every need not divide num_steps), calling "
    "train_one_step() exactly num_steps times, and return them stacked, (num_checkpoints, T, d_model). The code "
    "below runs and returns the right shape, yet every checkpoint, step 0 included, holds the trained table. Find "
    "the bug and fix it. The checker calls your function on fresh untrained models and compares the tables.",
    reference=_reference_history,
    cases=_history_cases,
    hint=["Step 0 holds the trained table although it was taken before any training. Was it taken too late, "
          "or did it change after it was taken? Compare the `data_ptr()` of a stored entry with the "
          "parameter's.",
          "optimizer.step() writes the new values into the parameter's own memory. What does `.detach()` give "
          "you: new memory with today's values, or a new name for the same memory?"],
    solution=_solution_position_history,
    buggy=buggy_position_history,
    bug_message="every checkpoint shares its memory with the parameter. `.detach()` makes a tensor that is cut off "
                "from the autograd graph but reads the same memory, and the optimiser overwrites that memory in "
                "place at every step, so by the time you stack them every entry holds the final table. `.data`, the "
                "tensors of `model.state_dict()`, and `.to(...)` or `.cpu()` on a tensor already on that device "
                "share the memory too. A checkpoint must keep the values themselves.",
    mistakes=[
        Mistake(_first_copied_only,
                "your step-0 table is right, but every later checkpoint holds the final table: the later "
                "checkpoints still share the parameter's memory, as in the buggy code."),
        Mistake(_no_step_zero,
                "your history starts after the first `every` steps. Keep the untrained table too, before the "
                "first step (step 0)."),
        Mistake(_kept_before_the_step,
                "you keep each table before a training step, so the table after the last step is missing when "
                "`every` divides `num_steps`. Keep it after steps every, 2 * every, ... up to num_steps."),
    ],
)
