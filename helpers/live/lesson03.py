"""Pictures of notebook 03 (trainable queries, keys and values): the training slider and two side-by-side views.

``training_explorer(run)`` is the live figure: a slider over the recorded training steps, the probe's attention
weights at that step on the left, the loss and the mean weight on the correct token on the right.
``weights_side_by_side`` draws two weight matrices on the same fixed 0..1 scale, for before/after comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..plotting import CourseFigure, Heatmap, new_figure
from ..tasks import TrainingRun
from ..widgets import LiveFigure, int_slider

__all__ = ["weights_side_by_side", "training_explorer"]


def weights_side_by_side(left: torch.Tensor, right: torch.Tensor, labels: Sequence[str],
                         titles: tuple[str, str]) -> CourseFigure:
    """Two ``(T, T)`` attention-weight matrices next to each other, both on the scale 0..1 (rows: queries)."""
    if len(titles) != 2:
        raise ValueError(f"titles must hold two strings, got {titles!r}")
    fig = new_figure(10, 4.2, ncols=2)
    for ax, weights, title in zip(fig.axes, (left, right), titles):
        Heatmap(ax, weights, labels, labels, vmin=0.0, vmax=1.0, title=title,
                colorbar_label="attention weight $a_{ij}$")
    return fig


def training_explorer(run: TrainingRun, step: int = 45) -> LiveFigure:
    """A slider over ``run.steps``: the probe's attention weights after that many steps, and the training curves.

    ``step`` is where the slider starts (default 45, half-way through the stripe forming in the lesson's run).
    The snapshots were recorded during training; moving the slider only redraws. The loss has its own axis on the
    left, the mean weight on the correct token its 0..1 axis on the right, with a labelled line at 1.0.
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
                      colorbar_label="attention weight $a_{ij}$")
    weight_ax = loss_ax.twinx()                 # the weight on its own 0..1 scale
    loss_line, = loss_ax.plot(range(len(run.losses)), run.losses, color="tab:red", label="loss (left axis)")
    weight_line, = weight_ax.plot(range(len(run.target_weights)), run.target_weights, color="tab:blue",
                                  label="weight on target (right axis)")
    target_line = weight_ax.axhline(1.0, color="tab:blue", linestyle=":", linewidth=1.2,
                                    label="1.0 = all weight on target")
    step_line = loss_ax.axvline(step, color="black", linestyle="--", linewidth=1.8, label="step shown")
    loss_ax.set_xlabel("training step")
    loss_ax.set_ylabel("cross-entropy loss", color="tab:red")
    loss_ax.set_ylim(0, max(run.losses) * 1.05)
    loss_ax.set_xlim(-2, len(run.losses) + 2)
    weight_ax.set_ylabel("mean weight on the correct token", color="tab:blue")
    weight_ax.set_ylim(0, 1.08)
    loss_ax.legend(handles=[loss_line, weight_line, target_line, step_line], loc="center right", fontsize=8, framealpha=0.95)
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
