"""The pictures of notebook 08 (watch attention learn): ideal patterns, heads at a checkpoint, rows locking onto
their source over training, and the training scrubber.

Every heatmap of weights shows attention weights ``A`` of one head on one sequence: rows are output positions (the
queries ``i``), columns the input tokens (the keys ``j``), on a fixed 0..1 colour scale unless a figure says
otherwise in its title. Red boxes mark the task's ideal pattern. Row labels read ``out i: X``: the letter output ``i``
must write (ideal pattern), or the letter the model writes, with a cross where it is wrong (trained heads).
Nothing is recomputed on a slider move: the training run saved every picture.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from ..plotting import CourseFigure, Heatmap, new_figure
from ..toy_model import FetchTask, ToyTrainingRun
from ..widgets import LiveFigure, int_slider

__all__ = ["key_labels", "query_labels", "mark_ideal", "ideal_pattern_figure", "heads_figure", "locking_figure",
           "position_scores_figure", "training_explorer"]

XLABEL = "key: input token $j$"
YLABEL = "query: output position $i$"


def key_labels(task: FetchTask, token_ids: torch.Tensor) -> list[str]:
    """The input tokens with their positions, e.g. ``"C·7"``: the key axis of every heatmap."""
    return [f"{letter}·{j}" for j, letter in enumerate(task.labels(token_ids))]


def query_labels(task: FetchTask, token_ids: torch.Tensor, answers: torch.Tensor | None = None) -> list[str]:
    """``"out i: X"``: the letter output ``i`` must write, or the model's ``answers`` with a cross where wrong."""
    wanted = task.labels(task.targets(token_ids))
    if answers is None:
        return [f"out {i}: {w}" for i, w in enumerate(wanted)]
    written = task.labels(answers)
    return [f"out {i}: {a}" + ("" if a == w else " ✗") for i, (a, w) in enumerate(zip(written, wanted))]


def mark_ideal(ax: Axes, task: FetchTask) -> None:
    """A red box on each cell of the task's ideal pattern, drawn above the heatmap."""
    for i, j in enumerate(task.source_positions().tolist()):
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5, zorder=3))


def _heatmap(ax: Axes, weights: torch.Tensor, task: FetchTask, token_ids: torch.Tensor, rows: Sequence[str],
             title: str, colorbar: bool = True, vmax: float = 1.0) -> Heatmap:
    heatmap = Heatmap(ax, weights, list(rows), key_labels(task, token_ids), vmin=0.0, vmax=vmax, annotate=False,
                      xlabel=XLABEL, ylabel=YLABEL, title=title, colorbar_label="attention weight $a_{ij}$")
    if not colorbar:  # one colour bar per row of panels is enough: they share the 0..1 scale
        heatmap.colorbar.remove()
    else:  # mark the uniform weight 1/T: an untrained head's weights sit there, dark on the 0..1 scale
        uniform, bar = 1 / task.num_tokens, heatmap.colorbar
        bar.ax.axhline(uniform, color="white", linewidth=1.5)
        ticks = sorted({float(t) for t in bar.get_ticks() if 0 <= t <= vmax and abs(t - uniform) > 0.06} | {uniform})
        bar.set_ticks(ticks, labels=[f"1/{task.num_tokens}: uniform" if t == uniform else f"{t:g}" for t in ticks])
    mark_ideal(ax, task)
    return heatmap


def ideal_pattern_figure(task: FetchTask, token_ids: torch.Tensor) -> CourseFigure:
    """The task's ideal attention on one example sequence ``(T,)``."""
    fig = new_figure(5.4, 4.6)
    _heatmap(fig.axes[0], task.ideal_pattern(), task, token_ids, query_labels(task, token_ids),
             f"Ideal weights $A$ for {task.name}")
    return fig


def heads_figure(run: ToyTrainingRun, task: FetchTask, watch_ids: torch.Tensor, steps: Sequence[int] = (),
                 example: int = 0, title: str = "", vmax: float = 1.0) -> CourseFigure:
    """Every head's weights on watched example ``example``: one row of panels per training step in ``steps``.

    ``steps`` defaults to the last checkpoint; ``title`` starts each panel's title (the head and step follow).
    ``vmax`` below 1 stretches the colour scale to show contrast in flat weights; the titles then say so.
    """
    steps = list(steps) or [run.steps[-1]]
    num_heads = run.weights.shape[2]
    fig = new_figure(5.0 * num_heads + 0.8, 4.3 * len(steps), ncols=num_heads, nrows=len(steps))
    for row, step in enumerate(steps):
        checkpoint = run.checkpoint(step)
        labels = query_labels(task, watch_ids[example], run.predictions[checkpoint, example])
        for head in range(num_heads):
            scale = "" if vmax == 1.0 else f"\n(colour scale 0 to {vmax:g}, for contrast)"
            _heatmap(fig.axes[row * num_heads + head], run.weights[checkpoint, example, head], task,
                     watch_ids[example], labels, f"{title}$A$ of head {head}, step {step}{scale}",
                     colorbar=head == num_heads - 1, vmax=vmax)
    return fig


def position_scores_figure(position_scores: torch.Tensor, task: FetchTask) -> CourseFigure:
    """Each head's position-only scores ``(H, T, T)``: row ``i``, column ``j`` is query position ``i``'s score for key
    position ``j`` with no letter involved, on a two-way scale centred at 0 (brown below, teal above); red boxes mark
    the task's ideal pattern, and each value is written in its cell."""
    if not isinstance(position_scores, torch.Tensor) or position_scores.dim() != 3 or \
            position_scores.shape[1:] != (task.num_tokens, task.num_tokens):
        raise ValueError(f"position_scores must have shape (num_heads, {task.num_tokens}, {task.num_tokens}), got "
                         f"{tuple(getattr(position_scores, 'shape', ()))}")
    scores = position_scores.detach().cpu().round() + 0.0   # whole numbers in the cells; + 0.0 turns -0 into 0
    num_heads, limit = scores.shape[0], float(scores.abs().max())
    fig = new_figure(5.2 * num_heads + 0.8, 4.6, ncols=num_heads)
    positions = [str(j) for j in range(task.num_tokens)]
    for head, ax in enumerate(fig.axes[:num_heads]):
        heatmap = Heatmap(ax, scores[head], [f"out {i}" for i in range(task.num_tokens)], positions, cmap="BrBG",
                          vmin=-limit, vmax=limit, fmt="{:.0f}", xlabel="key position $j$",
                          ylabel="query: output position $i$" if head == 0 else "",
                          title=f"Head {head}: position-only scores",
                          colorbar_label="$(P_i W_q^h)\\cdot(P_j W_k^h)/\\sqrt{d_\\mathrm{head}}$"
                          if head == num_heads - 1 else "")
        if head < num_heads - 1:
            heatmap.colorbar.remove()   # one colour bar: the panels share the scale
        for i, row in enumerate(heatmap.texts):   # each number dark on a light cell, light on a dark one
            for j, text in enumerate(row):
                red, green, blue, _ = heatmap.image.cmap(heatmap.image.norm(float(scores[head, i, j])))
                text.set_color("black" if 0.2126 * red + 0.7152 * green + 0.0722 * blue > 0.5 else "white")
        mark_ideal(ax, task)
    return fig


def locking_figure(run: ToyTrainingRun, task: FetchTask) -> CourseFigure:
    """For each head, the weight every output position puts on its source at every checkpoint.

    One panel per head, stacked, one labelled tick per checkpoint: rows are output positions ``i``, columns the
    checkpoints; each cell is the weight ``a_{i, source(i)}`` averaged over the watched examples. A two-way colour
    scale centred at 0.5, the lock threshold: red below, white at 0.5, blue above.
    """
    # (S, N, H, T, T) * (T, T) summed over keys -> (S, N, H, T); mean over the watched examples -> (S, H, T)
    on_source = (run.weights * task.ideal_pattern()).sum(dim=-1).mean(dim=1)
    num_heads = on_source.shape[1]
    fig = new_figure(11.0, 2.9 * num_heads + 0.3, nrows=num_heads)
    sources = task.source_positions().tolist()
    rows = [f"out {i} (source {j})" for i, j in enumerate(sources)]
    for head, ax in enumerate(fig.axes[:num_heads]):
        heatmap = Heatmap(ax, on_source[:, head].T, rows, [str(step) for step in run.steps], vmin=0.0, vmax=1.0,
                          cmap="RdBu", annotate=False, ylabel="query: output position $i$",
                          xlabel="training step" if head == num_heads - 1 else "",
                          title=rf"Head {head}: mean weight on the source, $a_{{i,\,\mathrm{{source}}(i)}}$, "
                                f"at each checkpoint")
        ax.set_xticks(range(len(run.steps)), labels=[str(s) for s in run.steps], rotation=0, ha="center")
        heatmap.colorbar.remove()   # one colour bar for both panels
    bar = fig.colorbar(fig.axes[0].images[0], ax=fig.axes[:num_heads], ticks=[0, 0.25, 0.5, 0.75, 1.0],
                       label="mean weight on the source\n(white = 0.5, the lock threshold)", aspect=30)
    bar.ax.axhline(0.5, color="black", linewidth=1.5)
    return fig


def training_explorer(run: ToyTrainingRun, task: FetchTask, watch_ids: torch.Tensor, step: int = 0,
                      example: int = 0) -> LiveFigure:
    """Two sliders (training step, watched example) over each head's weights, above the learning curves.

    Top: one heatmap per head at the chosen checkpoint and example. Bottom: held-out accuracy and each head's
    mean weight on the source over training, with a red line at the chosen step. ``step`` and ``example`` set
    where the sliders start (and so the picture a reader sees before moving them).
    """
    run.checkpoint(step)  # a clear error if there is no checkpoint at that step
    num_heads = run.weights.shape[2]
    fig = CourseFigure(figsize=(12, 8.2), layout="constrained")
    grid = fig.add_gridspec(2, num_heads, height_ratios=(1.45, 1))
    head_axes = [fig.add_subplot(grid[0, head]) for head in range(num_heads)]
    curve_ax = fig.add_subplot(grid[1, :])
    first = query_labels(task, watch_ids[0], run.predictions[0, 0])
    head_maps = [_heatmap(ax, run.weights[0, 0, head], task, watch_ids[0], first, "", colorbar=head == num_heads - 1)
                 for head, ax in enumerate(head_axes)]
    # (S, N, H, T, T) * (T, T) summed over keys -> (S, N, H, T), then the mean over examples and rows -> (S, H)
    on_source = (run.weights * task.ideal_pattern()).sum(dim=-1).mean(dim=(1, 3))
    curve_ax.plot(run.steps, run.accuracies, color="black", linewidth=2, label="held-out accuracy")
    for head in range(num_heads):
        curve_ax.plot(run.steps, on_source[:, head],
                      label=f"head {head}: weight on the source, mean over watched examples")
    right = run.steps[-1]
    curve_ax.axhline(1 / task.vocab_size, color="gray", linestyle=":", linewidth=1)
    curve_ax.text(right, 1 / task.vocab_size - 0.02, f"chance accuracy, 1/{task.vocab_size}", ha="right", va="top",
                  color="gray")
    curve_ax.axhline(1 / task.num_tokens, color="gray", linestyle="--", linewidth=1)
    curve_ax.text(right, 1 / task.num_tokens + 0.02, f"uniform weights, 1/T = 1/{task.num_tokens}", ha="right",
                  va="bottom", color="gray")
    step_line = curve_ax.axvline(0, color="red", linewidth=1.5)
    step_text = curve_ax.text(0, 1.02, "", color="red", ha="left", va="bottom")
    curve_ax.set(ylim=(0, 1.12), xlabel="training step", ylabel="accuracy, or mean weight\non the source",
                 title="Accuracy rises before the weights sharpen")
    # Right of the finished curves, between the baselines and the top: the legend covers no part of a curve.
    curve_ax.legend(loc="center right", bbox_to_anchor=(1.0, 0.55), borderaxespad=0.3)

    def redraw(step: int, example: int) -> None:
        checkpoint = run.checkpoint(step)
        for head, heatmap in enumerate(head_maps):
            heatmap.update(run.weights[checkpoint, example, head],
                           title=f"$A$ of head {head}, watched example {example}, step {step}")
            heatmap.ax.set_yticklabels(query_labels(task, watch_ids[example], run.predictions[checkpoint, example]))
            heatmap.ax.set_xticklabels(key_labels(task, watch_ids[example]))
        step_line.set_xdata([step, step])
        late = step > right / 2   # the label sits on the side of the line where there is room
        step_text.set_position((step - 0.01 * right if late else step + 0.01 * right, 1.02))
        step_text.set_horizontalalignment("right" if late else "left")
        step_text.set_text(f"step {step}: held-out accuracy {run.accuracies[checkpoint]:.0%}")

    every = run.steps[1] - run.steps[0]
    return LiveFigure(fig, redraw, {
        "step": int_slider("training step", step, 0, run.steps[-1], step=every),
        "example": int_slider("watched example", example, 0, len(watch_ids) - 1),
    }, animated=[step_line, step_text])
