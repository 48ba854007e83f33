"""Pictures and measurements of notebook 03 (trainable queries, keys and values).

* ``training_explorer(run)``: the live figure, a slider over the recorded training steps; the probe's attention
  weights at that step on the left, the loss and the mean weight on the target key on the right.
* ``weights_side_by_side``: two weight matrices on the same fixed 0..1 scale, with one colour bar for both.
* ``first_step_reaching(run, task, level)``: for each row of the probe, the first recorded step at which its weight
  on the target key reaches ``level``.
* ``reverse_all_dims(x)``: what ``x.T`` does to a batch (the shape, and the first sentence of PyTorch's warning).
* The initialisation deep dive: ``init_table`` (untrained: how far the scaled scores spread, how peaked the
  weights are, for growing input widths, one column per class), ``init_side_by_side`` (two initialisations'
  weights in one picture), ``train_inits`` (each class trained on the task, for a few seeds) and ``trained_tables``
  (three tables, one row per class: steps until the probe's weight on the target reaches 0.9, the final loss, and
  why a saturated softmax stalls training: rows that are exactly one-hot, the gradient that reaches ``W_query``,
  via ``saturation``; and Adam's steps on ``W_query``, via ``adam_first_step``).

The modules measured are any classes built as ``cls(d_in, d_out)`` whose ``W_query`` and ``W_key`` are either a
``(d_in, d_out)`` matrix (``SelfAttention_v1``) or an ``nn.Linear`` (``SelfAttention_v2``), and whose
``forward(x, return_weights=True)`` returns ``(context_vecs, attn_weights)``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from copy import deepcopy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ..plotting import CourseFigure, Heatmap, new_figure
from ..tasks import PreviousTokenTask, TrainingRun, train_attention, weight_on_target
from ..training import one_thread
from ..widgets import LiveFigure, int_slider

__all__ = ["weights_side_by_side", "training_explorer", "first_step_reaching", "reverse_all_dims", "InitStats",
           "init_stats", "init_table", "init_side_by_side", "saturation", "mean_largest_weight", "adam_first_step", "train_inits",
           "TrainedTables", "trained_tables"]

WEIGHT_LABEL = "attention weight $a_{ij}$ (0 to 1)"
ON_TARGET = "mean weight on the target key"
LABEL_WIDTH = 50  # the row labels of init_table
CELL_WIDTH = 22   # one column of init_table


def weights_side_by_side(left: torch.Tensor, right: torch.Tensor, labels: Sequence[str],
                         titles: tuple[str, str]) -> CourseFigure:
    """Two ``(T, T)`` attention-weight matrices next to each other on the scale 0..1 (rows: queries).

    Both panels share that scale, so one colour bar, on the right, serves both.
    """
    if len(titles) != 2:
        raise ValueError(f"titles must hold two strings, got {titles!r}")
    fig = new_figure(9.5, 4.2, ncols=2)
    for index, (ax, weights, title) in enumerate(zip(list(fig.axes), (left, right), titles)):
        heatmap = Heatmap(ax, weights, labels, labels, vmin=0.0, vmax=1.0, title=title,
                          colorbar_label=WEIGHT_LABEL)
        if index == 0:  # the same 0..1 scale on both sides: one colour bar is enough
            heatmap.colorbar.remove()
    return fig


def training_explorer(run: TrainingRun, step: int = 60) -> LiveFigure:
    """A slider over ``run.steps``: the probe's attention weights after that many steps, and the training curves.

    ``step`` is where the slider starts (default 60: in the lesson's run every row has found its target by then).
    The snapshots were recorded during training; moving the slider only redraws. The loss has its own axis on the
    left, the mean weight on the target key its 0..1 axis on the right, with a labelled line at 1.0.
    Attributes for inspection: ``.heatmap`` (the left :class:`Heatmap`), ``.step_line`` (the marker on the right).
    """
    if not isinstance(run, TrainingRun):
        raise TypeError(f"run must be a TrainingRun from helpers.train_attention, got {type(run).__name__}")
    if step not in run.steps:
        raise ValueError(f"step must be one of the recorded steps {run.steps[0]}, {run.steps[1]}, ..., "
                         f"{run.steps[-1]}, got {step!r}")
    labels = run.probe_labels
    fig = new_figure(10.5, 4.2, ncols=2)
    heat_ax, loss_ax = fig.axes
    heatmap = Heatmap(heat_ax, run.snapshots[run.steps.index(step)], labels, labels, vmin=0.0, vmax=1.0,
                      colorbar_label=WEIGHT_LABEL)
    weight_ax = loss_ax.twinx()                 # the weight on its own 0..1 scale
    loss_line, = loss_ax.plot(range(len(run.losses)), run.losses, color="tab:red",
                              label="loss (left axis)")  # loss i: on a batch, with the weights after i steps
    weight_line, = weight_ax.plot(range(len(run.target_weights)), run.target_weights, color="tab:blue",
                                  label="weight on target key (right axis)")
    target_line = weight_ax.axhline(1.0, color="tab:blue", linestyle=":", linewidth=1.2,
                                    label="1.0 = all weight on target")
    step_line = loss_ax.axvline(step, color="black", linestyle="--", linewidth=1.8, label="step shown")
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("cross-entropy loss", color="tab:red")
    loss_ax.set_ylim(0, max(run.losses) * 1.05)
    loss_ax.set_xlim(-2, len(run.losses) + 2)
    weight_ax.set_ylabel(ON_TARGET, color="tab:blue")
    weight_ax.set_ylim(0, 1.08)
    loss_ax.legend(handles=[loss_line, weight_line, target_line, step_line], loc="center right", fontsize=8,
                   framealpha=0.95)
    loss_ax.set_title("Loss falls as the pattern forms")
    step_size = run.steps[1] - run.steps[0] if len(run.steps) > 1 else 1

    def redraw(step: int) -> None:
        index = max(i for i, recorded in enumerate(run.steps) if recorded <= step)  # the snapshot shown
        heatmap.update(run.snapshots[index],
                       title=f"$A$ on the probe after {step} steps (on target: {run.target_weights[step]:.2f})")
        step_line.set_xdata([step, step])

    slider = int_slider("training step", step, 0, run.steps[-1], step=step_size)
    view = LiveFigure(fig, redraw, {"step": slider}, animated=[step_line])  # redraw moves the line: repaint it alone
    view.heatmap, view.step_line = heatmap, step_line
    return view


def first_step_reaching(run: TrainingRun, task: PreviousTokenTask, level: float = 0.5) -> list[int | None]:
    """For each row (query) of the probe: the first recorded step of ``run`` at which that row's weight on its
    target key is at least ``level`` (``None`` for a row that never gets there)."""
    if not isinstance(run, TrainingRun):
        raise TypeError(f"run must be a TrainingRun from helpers.train_attention, got {type(run).__name__}")
    if not isinstance(task, PreviousTokenTask):
        raise TypeError(f"task must be a PreviousTokenTask, got {type(task).__name__}")
    on_target = weight_on_target(run.snapshots, task.target_positions())   # (snapshots, T)
    reached = on_target >= level                                            # (snapshots, T)
    return [run.steps[int(column.nonzero()[0])] if column.any() else None for column in reached.T]


def reverse_all_dims(x: torch.Tensor) -> tuple[tuple[int, ...], str]:
    """``x.T`` on a tensor of three or more dimensions: the shape it gives (all dimensions reversed) and the first
    sentence of the warning PyTorch raises about it (PyTorch raises it once per session; later calls say so)."""
    if not isinstance(x, torch.Tensor) or x.dim() < 3:
        raise TypeError("x must be a tensor of three or more dimensions, such as a batch of keys (B, T, d_k)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shape = tuple(x.T.shape)
    if not caught:
        return shape, "(its warning about x.T was already shown once in this session)"
    return shape, str(caught[0].message).split(". ")[0]


# --- the initialisation deep dive -------------------------------------------------------------------------------
def _check_inits(inits, exactly: int | None = 2) -> None:
    """``inits`` must be a dict {name: module class}, of ``exactly`` entries (None: one or more)."""
    if not isinstance(inits, Mapping) or not inits or (exactly is not None and len(inits) != exactly):
        count = f"{exactly} entries" if exactly is not None else "one or more entries"
        raise TypeError(f"inits must be a dict of {count}, {{name: module class}}, e.g. "
                        "{'torch.rand': SelfAttention_v1, 'nn.Linear': SelfAttention_v2}")
    for name, cls in inits.items():
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise TypeError(f"inits[{name!r}] must be an nn.Module class, got {cls!r}")


def _project(layer, x: torch.Tensor) -> torch.Tensor:
    """``x`` projected by a ``(d_in, d_out)`` matrix (SelfAttention_v1) or an ``nn.Linear`` (SelfAttention_v2)."""
    return layer(x) if isinstance(layer, nn.Module) else x @ layer


def _query_weight(model: nn.Module) -> torch.Tensor:
    layer = model.W_query
    return layer.weight if isinstance(layer, nn.Linear) else layer


def _build(cls: type, d_in: int, d_out: int, seed: int, device) -> nn.Module:
    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left alone
        torch.manual_seed(seed)
        return cls(d_in, d_out).to(device)


def _random_embeddings(d_in: int, num_tokens: int = 6, seed: int = 2024) -> torch.Tensor:
    """``(num_tokens, d_in)`` positive "embeddings" from [0, 1), drawn from their own generator."""
    return torch.rand(num_tokens, d_in, generator=torch.Generator().manual_seed(seed))


@dataclass
class InitStats:
    """One row of :func:`init_table`: the spread (std) of ``S / sqrt(d_k)`` and the mean of each row's largest
    weight (1.0: one-hot, ``1/T``: uniform), for one initialisation at one input width."""

    d_in: int
    init: str
    spread: float
    largest: float


def init_stats(inits: Mapping[str, type], widths: Sequence[int] = (3, 32, 256), d_out: int = 2,
               seed: int = 123, device=None) -> list[InitStats]:
    """Untrained modules (built under ``torch.manual_seed(seed)``) on six random positive inputs per width."""
    _check_inits(inits, exactly=None)
    rows = []
    for d_in in widths:
        x = _random_embeddings(d_in).to(device)
        for name, cls in inits.items():
            module = _build(cls, d_in, d_out, seed, device)
            with torch.no_grad():
                queries, keys = _project(module.W_query, x), _project(module.W_key, x)
                scaled_scores = queries @ keys.mT / math.sqrt(keys.shape[-1])      # S / sqrt(d_k): (T, T)
                _, attn_weights = module(x, return_weights=True)                   # A: (T, T)
            rows.append(InitStats(d_in, name, scaled_scores.std().item(),
                                  attn_weights.max(dim=-1).values.mean().item()))
    return rows


def init_table(inits: Mapping[str, type], widths: Sequence[int] = (3, 32, 256), d_out: int = 2,
               seed: int = 123, device=None) -> str:
    """:func:`init_stats` as a table, one column per class of ``inits`` (two decimals): the spread (std) of
    ``S / sqrt(d_k)`` and the mean of each row's largest weight, one line per width."""
    names = list(inits)
    stats = {(row.d_in, row.init): row for row in init_stats(inits, widths, d_out, seed, device)}

    def line(label: str, cells: Sequence[str]) -> str:
        return f"{label:<{LABEL_WIDTH}}" + "".join(f"{cell:<{CELL_WIDTH}}" for cell in cells).rstrip()

    lines = [line("", names), f"untrained, d_k = {d_out}, on six random positive inputs:"]
    for what, attribute in ((("spread (std) of S/√d_k",), "spread"),
                            (("largest a_ij per row, mean", "(1.00: one-hot; 0.17: uniform)"), "largest")):
        for index, d_in in enumerate(widths):
            text = what[index] if index < len(what) else ""
            label = f"  {text:<{LABEL_WIDTH - 14}}d_in = {d_in:>3}"
            lines.append(line(label, [f"{getattr(stats[d_in, name], attribute):.2f}" for name in names]))
    return "\n".join(lines)


def init_side_by_side(inits: Mapping[str, type], d_in: int = 32, d_out: int = 2, seed: int = 123,
                      device=None) -> CourseFigure:
    """The untrained weights ``A`` of both initialisations on the same six random inputs, side by side."""
    _check_inits(inits)
    x = _random_embeddings(d_in).to(device)
    weights = []
    for cls in inits.values():
        with torch.no_grad():
            weights.append(_build(cls, d_in, d_out, seed, device)(x, return_weights=True)[1].cpu())
    labels = [f"token {i}" for i in range(x.shape[0])]
    titles = tuple(f"$A$, {name} init, $d_\\mathrm{{in}}$ = {d_in}" for name in inits)
    return weights_side_by_side(weights[0], weights[1], labels, titles)


def saturation(model: nn.Module, task: PreviousTokenTask, batch_size: int = 64,
               seed: int = 99) -> tuple[float, float]:
    """On a fresh batch of the task: the share of attention rows that are exactly one-hot (largest weight exactly
    1.0 in float32), and the norm of the gradient of the loss with respect to ``W_query``.

    The gradient is computed with ``torch.autograd.grad``: the model's ``.grad`` fields are left as they are.
    """
    if not isinstance(task, PreviousTokenTask):
        raise TypeError(f"task must be a PreviousTokenTask, got {type(task).__name__}")
    device = _query_weight(model).device
    token_ids = task.sample(batch_size, torch.Generator().manual_seed(seed))          # (B, T)
    logits, attn_weights = model(task.embed(token_ids).to(device), return_weights=True)  # (B, T, V), (B, T, T)
    targets = task.targets(token_ids).to(device)                                         # (B, T)
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    grad, = torch.autograd.grad(loss, _query_weight(model))
    one_hot = (attn_weights.max(dim=-1).values == 1.0).float().mean().item()
    return one_hot, grad.norm().item()


def mean_largest_weight(model: nn.Module, task: PreviousTokenTask, batch_size: int = 64, seed: int = 99) -> float:
    """On the fresh batch :func:`saturation` uses: the mean over all attention rows of the row's largest weight
    (1.0 when every row is one-hot, ``1 / T`` when every row is uniform)."""
    if not isinstance(task, PreviousTokenTask):
        raise TypeError(f"task must be a PreviousTokenTask, got {type(task).__name__}")
    device = _query_weight(model).device
    token_ids = task.sample(batch_size, torch.Generator().manual_seed(seed))          # (B, T)
    with torch.no_grad():
        _, attn_weights = model(task.embed(token_ids).to(device), return_weights=True)  # (B, T, T)
    return attn_weights.max(dim=-1).values.mean().item()


def _grad_text(value: float) -> str:
    return "< 1e-12" if value < 1e-12 else f"{value:.0e}"  # one digit: CPU and GPU agree on it


def train_inits(task: PreviousTokenTask, inits: Mapping[str, type], seeds: Sequence[int] = (0, 1, 2),
                device=None, num_steps: int = 200) -> dict[tuple[str, int], TrainingRun]:
    """``train_attention(task, cls, seed=seed, num_steps=num_steps)`` for every class of ``inits`` and every
    seed, keyed ``(cls.__name__, seed)``; on the CPU, on one thread
    (:func:`helpers.training.one_thread`: the models are so small that handing their products between threads costs
    more than the arithmetic; on a busy two-core machine the six runs took 168 s of wall time on two threads, 15 s
    on one)."""
    _check_inits(inits, exactly=None)
    with one_thread():
        return {(cls.__name__, seed): train_attention(task, cls, seed=seed, num_steps=num_steps, device=device)
                for seed in seeds for cls in inits.values()}


def adam_first_step(model: nn.Module, task: PreviousTokenTask, lr: float = 0.02, batch_size: int = 64,
                    seed: int = 99) -> float:
    """The length (norm) of the change that one ``torch.optim.Adam(lr=lr)`` step makes to ``W_query``, on the fresh
    batch :func:`saturation` uses. The step is taken on a copy: ``model`` is left as it is.

    Adam divides each entry's step by that entry's running gradient size, so a first step moves every entry whose
    gradient is well above Adam's ``eps`` (1e-8) by about ``lr``: the length is near ``lr * sqrt(entries)``,
    whatever the size of the gradient.
    """
    if not isinstance(task, PreviousTokenTask):
        raise TypeError(f"task must be a PreviousTokenTask, got {type(task).__name__}")
    copy = deepcopy(model)
    device = _query_weight(copy).device
    optimizer = torch.optim.Adam(copy.parameters(), lr=lr)
    token_ids = task.sample(batch_size, torch.Generator().manual_seed(seed))          # (B, T)
    logits = copy(task.embed(token_ids).to(device))                                  # (B, T, V)
    targets = task.targets(token_ids).to(device)                                     # (B, T)
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    before = _query_weight(copy).detach().clone()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return (_query_weight(copy).detach() - before).norm().item()


class TrainedTables(NamedTuple):
    """The three tables of :func:`trained_tables`, each a printable string; ``str()`` of the whole joins them."""

    outcome: str
    softmax: str
    adam: str

    def __str__(self) -> str:
        return "\n\n".join(self)


def trained_tables(task: PreviousTokenTask, inits: Mapping[str, type], seeds: Sequence[int] = (0, 1, 2),
                   level: float = 0.9, num_steps: int = 200, device=None) -> TrainedTables:
    """Every class of ``inits`` trained on ``task`` once per seed (:func:`train_inits`), in three small tables
    (the fields of :class:`TrainedTables`, so a lesson can print and discuss one at a time) with one row per class
    and one quantity per column:

    1. the outcome, seed by seed: after how many steps (rounded to 10) the probe's mean weight on the target key
       first reaches ``level``, and the final loss;
    2. the softmax, for the first seed, untrained and trained (:func:`saturation`, :func:`mean_largest_weight`):
       the share of rows of ``A`` that are exactly one-hot, the mean largest weight, the gradient norm at ``W_query``;
    3. Adam's steps, for the first seed: the length of the untrained ``W_query``, of Adam's first step
       (:func:`adam_first_step`), the step as a share of that length, and how far ``W_query`` moved in training."""
    _check_inits(inits, exactly=None)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    runs = train_inits(task, inits, seeds, device, num_steps)
    first, vocab_size = seeds[0], len(task.vocab)
    lr = inspect.signature(train_attention).parameters["lr"].default  # the rate the runs were trained with
    eps = inspect.signature(torch.optim.Adam).parameters["eps"].default
    seed_text = ", ".join(str(seed) for seed in seeds)

    def table(widths: Sequence[int], rows: Sequence[Sequence[str]]) -> list[str]:
        return [("".join(f"{cell:<{width}}" for cell, width in zip(row, widths)) + row[-1]).rstrip() for row in rows]

    outcome = [["init", f"steps until mean weight on target ≥ {level}", "final loss"]]
    softmax = [["", "one-hot rows of A", "", "mean largest a_ij", "gradient norm at W_q", ""],
               ["init", "untrained", "trained", "untrained", "untrained", "trained"]]
    adam = [["init", "length of W_q, untrained", "Adam's first step", "step / length",
             f"W_q moved in {num_steps} steps"]]
    for name, cls in inits.items():
        reached = [runs[cls.__name__, seed].steps_to_reach(level) for seed in seeds]
        steps = ", ".join("never" if r is None else str(round(r, -1)) for r in reached)
        losses = ", ".join(f"{runs[cls.__name__, seed].losses[-1]:.2f}" for seed in seeds)
        outcome.append([name, steps, losses])
        trained = runs[cls.__name__, first].model
        untrained = _build(cls, task.d_in, vocab_size, first, _query_weight(trained).device)
        (hot_0, grad_0), (hot_1, grad_1) = saturation(untrained, task), saturation(trained, task)
        softmax.append([name, f"{hot_0:.0%}", f"{hot_1:.0%}", f"{mean_largest_weight(untrained, task):.2f}",
                        _grad_text(grad_0), _grad_text(grad_1)])
        start = _query_weight(untrained).detach()
        moved = (_query_weight(trained).detach() - start).norm().item()
        step = adam_first_step(untrained, task, lr=lr)
        adam.append([name, f"{start.norm().item():.2f}", f"{step:.2f}", f"{step / start.norm().item():.0%}",
                     f"{moved:.2f}"])
    return TrainedTables(
        "\n".join([f"trained on the task, d_in = {task.d_in}, d_k = {vocab_size}, {num_steps} steps, seeds "
                   f"{seed_text} (steps rounded to 10)"] + table((12, 46), outcome)),
        "\n".join([f"the softmax: seed {first}, on a fresh batch"] + table((12, 12, 16, 20, 12), softmax)),
        "\n".join([f"Adam's steps (lr = {lr}, eps = {eps:.0e}): seed {first}"] + table((12, 28, 20, 16), adam)))
