"""Notebook 08's exercises: right answers in any reasonable form pass, plausible wrong ones are named, every stated
rule is checked, and no hint gives the answer away."""

import pytest
import torch

from helpers.exercises import lesson08


def _lock_by_last_below(on_source, steps):
    below = on_source <= 0.5
    index = torch.arange(on_source.shape[0]).unsqueeze(1).expand_as(below)
    lock = torch.where(below, index, -1).max(dim=0).values + 1          # one after the last checkpoint below
    return torch.where(lock < len(steps), steps[lock.clamp(max=len(steps) - 1)], -1)


def _lock_by_cummin(on_source, steps):
    stays = on_source.flip(0).cummin(dim=0).values.flip(0) > 0.5      # the lowest weight from here on
    return torch.where(stays[-1], steps[stays.float().argmax(dim=0)], torch.tensor(-1))


def _looped_lock_steps(on_source, steps):
    result = []
    for row in range(on_source.shape[1]):
        above = on_source[:, row] > 0.5
        result.append(-1 if not above[-1] else int(steps[len(above) - int(above.flip(0).int().cumprod(0).sum())]))
    return torch.tensor(result)


@pytest.mark.parametrize("answer", [_lock_by_last_below, _lock_by_cummin])
def test_lock_steps_accepts_every_right_form(answer):
    assert lesson08.lock_steps.check(answer).passed


@pytest.mark.parametrize("wrong, words", [
    (lambda w, steps: torch.where((w > 0.5).any(0), steps[(w > 0.5).int().argmax(0)], -1), "STAYS above"),
    (lambda w, steps: torch.where((w > 0.5)[-1], (w > 0.5).flip(0).cumprod(0).flip(0).int().argmax(0), -1),
     "checkpoint indices"),
    (_looped_lock_steps, "no Python loop"),
    (lambda w, steps: torch.where((w > 0.5)[-1], steps[(w > 0.5).flip(0).cumprod(0).flip(0).int().argmax(0)],
                                  0), "never locked"),
])
def test_lock_steps_rejects_wrong_answers(wrong, words):
    feedback = lesson08.lock_steps.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_lock_steps_cases_hold_a_dip_a_row_that_never_locks_and_one_locked_from_the_start():
    cases = lesson08.lock_steps.cases(torch.Generator().manual_seed(lesson08.lock_steps.seed))
    locks = torch.cat([lesson08.lock_steps.reference(*case.args) for case in cases]).tolist()
    first_crossings = torch.cat([torch.where((w > 0.5).any(0), s[(w > 0.5).int().argmax(0)], -1)
                                 for w, s in (case.args for case in cases)]).tolist()
    assert -1 in locks and 0 in locks
    assert first_crossings != locks   # the dipping row separates "first above" from "stays above"


def _ceiling(test_ids, vocab_size):
    """The deep dive's ceiling: the best accuracy possible without positions, as the notebook computes it."""
    own = torch.nn.functional.one_hot(test_ids, vocab_size)
    others = own.sum(dim=1, keepdim=True) - own
    return float((others.max(dim=-1).values / (test_ids.shape[1] - 1)).float().mean())


def _reference_ceiling(token_ids, vocab_size):
    num_tokens, total = token_ids.shape[1], 0.0
    for sequence in token_ids.tolist():
        for own in sequence:
            others = list(sequence)
            others.remove(own)   # the source is one of the other T - 1 tokens, each equally likely
            total += max(others.count(letter) for letter in range(vocab_size)) / (num_tokens - 1)
    return total / token_ids.numel()


def test_the_notebook_s_ceiling_formula_equals_the_counting_by_hand():
    g = torch.Generator().manual_seed(0)
    for batch, tokens, vocab in ((3, 4, 4), (200, 8, 10), (50, 6, 3)):
        ids = torch.randint(0, vocab, (batch, tokens), generator=g)
        assert abs(_ceiling(ids, vocab) - _reference_ceiling(ids, vocab)) < 1e-6


def test_the_ceiling_is_an_expectation_the_model_meets_and_its_score_is_luck_of_the_order():
    """What the deep dive says about 32.0% against a ceiling of 31.6%: the model's answers are the best guesses,
    its EXPECTED accuracy over the orders of each test sequence's letters equals the ceiling, and the score on the
    one order the test set holds lies within the spread of scores over other orders."""
    from helpers.toy_model import FetchTask, train_toy_model

    task = FetchTask.reversal(num_tokens=8, vocab_size=10)
    watch_ids = task.sample(8, torch.Generator().manual_seed(1))
    test_ids = task.sample(1000, torch.Generator().manual_seed(2))
    blind = train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=100, lr=0.01, seed=0,
                            checkpoint_every=50, use_positions=False)
    ceiling = _ceiling(test_ids, 10)
    with torch.no_grad():
        answers = blind.model(test_ids).argmax(dim=-1)                                 # (1000, 8)
    own = torch.nn.functional.one_hot(test_ids, 10)
    others = own.sum(dim=1, keepdim=True) - own                                       # (1000, 8, 10)
    chosen = others.gather(-1, answers.unsqueeze(-1)).squeeze(-1)                     # count of the guessed letter
    assert (chosen == others.max(dim=-1).values).float().mean() > 0.999               # best guesses everywhere
    expected = float((chosen / 7).float().mean())
    assert expected <= ceiling + 1e-6 and ceiling - expected < 0.001
    assert round(ceiling, 3) == 0.316 and round(blind.accuracies[-1], 3) == 0.320      # the numbers the text quotes
    scores = []
    g = torch.Generator().manual_seed(0)
    for _ in range(50):   # the same letters in other random orders
        order = torch.argsort(torch.rand(test_ids.shape, generator=g), dim=1)
        ids = test_ids.gather(1, order)
        with torch.no_grad():
            scores.append(float((blind.model(ids).argmax(dim=-1) == task.targets(ids)).float().mean()))
    scores = torch.tensor(scores)
    assert abs(float(scores.mean()) - ceiling) < 0.003 and 0.003 < float(scores.std()) < 0.006
    assert float(scores.max()) > blind.accuracies[-1]   # other orders score higher still


# --- exercise 2: checkpoints that share memory with the parameters ------------------------------------------------
def _history_by_deepcopy(model, train_one_step, num_steps, every):
    import copy
    history = [copy.deepcopy(model.position_embedding.weight)]
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(copy.deepcopy(model.position_embedding.weight))
    return torch.stack(history)


def _history_by_clone_then_detach(model, train_one_step, num_steps, every):
    history = [model.position_embedding.weight.clone().detach()]
    for step in range(num_steps):
        train_one_step()
        if (step + 1) % every == 0:
            history.append(model.position_embedding.weight.clone().detach())
    return torch.stack(history)


def _history_under_no_grad(model, train_one_step, num_steps, every):
    def keep():
        with torch.no_grad():
            return model.position_embedding.weight.clone()
    history = [keep()]
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(keep())
    return torch.stack(history)


def _history_from_state_dict_copied(model, train_one_step, num_steps, every):
    history = [model.state_dict()["position_embedding.weight"].clone()]
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(model.state_dict()["position_embedding.weight"].clone())
    return torch.stack(history)


def _history_stacked_as_it_goes(model, train_one_step, num_steps, every, copy_first=True):
    first = model.position_embedding.weight.detach()
    history = (first.clone() if copy_first else first).unsqueeze(0)
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:   # torch.cat copies what it joins, at the moment it joins it
            history = torch.cat([history, model.position_embedding.weight.detach().unsqueeze(0)])
    return history


@pytest.mark.parametrize("answer", [_history_by_deepcopy, _history_by_clone_then_detach, _history_under_no_grad,
                                    _history_from_state_dict_copied, _history_stacked_as_it_goes])
def test_checkpoint_copies_accepts_every_right_form(answer):
    assert lesson08.checkpoint_copies.check(answer).passed


def _aliasing(keep):
    def history_fn(model, train_one_step, num_steps, every):
        history = [keep(model)]
        for step in range(1, num_steps + 1):
            train_one_step()
            if step % every == 0:
                history.append(keep(model))
        return torch.stack(history)
    return history_fn


@pytest.mark.parametrize("wrong, words", [
    (lesson08.buggy_position_history, "shares its memory"),
    (_aliasing(lambda m: m.position_embedding.weight.data), "shares its memory"),
    (_aliasing(lambda m: m.state_dict()["position_embedding.weight"]), "shares its memory"),
    (_aliasing(lambda m: m.position_embedding.weight.detach().cpu()), "shares its memory"),
    (_aliasing(lambda m: m.position_embedding.weight.detach().to(torch.float32)), "shares its memory"),
    (lesson08._first_copied_only, "step-0 table is right"),
    (lesson08._no_step_zero, "step 0"),
    (lesson08._kept_before_the_step, "after the last step is missing"),
    # torch.cat copies, but only at the first checkpoint after step 0: by then the uncopied step 0 has moved
    (lambda model, step, n, every: _history_stacked_as_it_goes(model, step, n, every, copy_first=False),
     "the values are not"),
    (lambda model, step, n, every: torch.stack([model.position_embedding.weight.detach().clone()] * (n // every + 1)),
     "the values are not"),
])
def test_checkpoint_copies_names_each_mistake(wrong, words):
    feedback = lesson08.checkpoint_copies.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_checkpoint_copies_cases_are_irregular_and_every_case_shows_the_bug():
    """Each case: the bug's stored step 0 differs from the real untrained table (the weights do move) and every entry
    of the bug's history is the same table; Adam and plain SGD; one case where every does not divide num_steps, one
    with a checkpoint after every step."""
    cases = lesson08.checkpoint_copies.cases(torch.Generator().manual_seed(0))
    recipes = [case.args for case in cases]
    assert any(r[-2] % r[-1] for r in recipes) and any(r[-1] == 1 for r in recipes)
    assert {r[3] for r in recipes} == {torch.optim.Adam, torch.optim.SGD}
    for case in cases:
        args, _ = case.fresh_args()
        right = lesson08.checkpoint_copies.reference(*args)
        args, _ = case.fresh_args()
        buggy = lesson08.buggy_position_history(*args)
        assert right.shape == buggy.shape
        assert (right[0] - buggy[0]).abs().max() > 1e-3
        assert all(torch.equal(entry, buggy[-1]) for entry in buggy)   # one table, the final one, in every entry


@pytest.mark.parametrize("name, answer_words", [
    ("lock_steps", ["cumprod", "cummin", "flip(", "argmax", "torch.where"]),
    ("checkpoint_copies", [".clone()", "clone(", "deepcopy", "copy.", "torch.no_grad"]),
])
def test_hints_are_nudges_not_answers(name, answer_words):
    hints = " ".join(getattr(lesson08, name)._hints)
    for words in answer_words:
        assert words not in hints, f"{name}: a hint gives away {words!r}"


def test_one_exercise_and_one_spot_the_bug():
    exercises = [getattr(lesson08, name) for name in lesson08.__all__]
    kinds = [type(e).__name__ for e in exercises]
    assert kinds == ["FunctionExercise", "SpotTheBug"]


def test_lock_steps_uses_irregular_checkpoint_steps():
    """Steps that are not evenly spaced from 0: an answer that assumes step = index * every must fail."""
    cases = lesson08._curves_cases(torch.Generator().manual_seed(0))
    assert any(not torch.equal(c.args[1], torch.arange(len(c.args[1])) * (c.args[1][1] - c.args[1][0]))
               for c in cases)

    def assumes_even_steps(row_weights, steps):
        stays = (row_weights > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
        every = steps[1] - steps[0]
        return torch.where(stays[-1], stays.int().argmax(dim=0) * every, -1)

    assert lesson08.lock_steps.check(assumes_even_steps).status == "wrong"


# --- the holes of the December review, each closed as a class ----------------------------------------------------
def test_lock_steps_rejects_at_or_above_where_the_task_says_above():
    """A threshold no input reaches cannot tell > from >=: some case sits exactly on 0.5, and >= is named."""
    wrong = (lambda w, steps: torch.where((w >= 0.5)[-1], steps[(w >= 0.5).flip(0).cumprod(0).flip(0).int()
                                                                  .argmax(0)], -1))
    feedback = lesson08.lock_steps.check(wrong)
    assert feedback.status == "wrong" and "exactly 0.5" in feedback.message, feedback.message


def test_every_threshold_of_lock_steps_has_an_input_on_it_that_changes_the_answer():
    cases = lesson08.lock_steps.cases(torch.Generator().manual_seed(lesson08.lock_steps.seed))
    assert any(bool((case.args[0] == 0.5).any()) for case in cases)
    assert any(not torch.equal(lesson08._at_or_above(*case.args), lesson08.lock_steps.reference(*case.args))
               for case in cases)


def _history_rounded_down(model, train_one_step, num_steps, every):
    """Right checkpoints, but training stops at the last multiple of `every`: fewer steps than asked for."""
    history = [model.position_embedding.weight.detach().clone()]
    for step in range(1, num_steps // every * every + 1):
        train_one_step()
        if step % every == 0:
            history.append(model.position_embedding.weight.detach().clone())
    return torch.stack(history)


def _history_one_step_too_many(model, train_one_step, num_steps, every):
    history = [model.position_embedding.weight.detach().clone()]
    for step in range(1, num_steps + 1):
        train_one_step()
        if step % every == 0:
            history.append(model.position_embedding.weight.detach().clone())
    train_one_step()
    return torch.stack(history)


@pytest.mark.parametrize("wrong", [_history_rounded_down, _history_one_step_too_many])
def test_checkpoint_copies_counts_the_training_steps_the_task_states(wrong):
    feedback = lesson08.checkpoint_copies.check(wrong)
    assert feedback.status == "wrong" and "called train_one_step()" in feedback.message, feedback.message
    assert "exactly num_steps" in feedback.message
