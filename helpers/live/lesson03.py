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


def training_explorer(run: TrainingRun) -> LiveFigure:
    """A slider over ``run.steps``: the probe's attention weights after that many steps, and the training curves.

    The snapshots were recorded during training; moving the slider only redraws.
    Attributes for inspection: ``.heatmap`` (the left :class:`Heatmap`), ``.step_line`` (the marker on the right).
    """
    if not isinstance(run, TrainingRun):
        raise TypeError(f"run must be a TrainingRun from helpers.train_attention, got {type(run).__name__}")
    labels = run.probe_labels
    fig = new_figure(10.5, 4.2, ncols=2)
    heat_ax, curve_ax = fig.axes
    heatmap = Heatmap(heat_ax, run.snapshots[0], labels, labels, vmin=0.0, vmax=1.0,
                      colorbar_label="attention weight $a_{ij}$")
    curve_ax.plot(range(len(run.losses)), run.losses, color="tab:red", label="training loss")
    curve_ax.plot(range(len(run.target_weights)), run.target_weights, color="tab:blue",
                  label="mean weight on the correct token")
    curve_ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
    step_line = curve_ax.axvline(0, color="black", linewidth=1.5)
    curve_ax.set_xlabel("training step")
    curve_ax.set_ylabel("loss  /  weight on the correct token")
    curve_ax.set_ylim(0, max(run.losses) * 1.05)
    curve_ax.legend(loc="upper right")
    curve_ax.set_title("Loss falls as the pattern forms")
    step_size = run.steps[1] - run.steps[0] if len(run.steps) > 1 else 1

    def redraw(step: int) -> None:
        index = max(i for i, recorded in enumerate(run.steps) if recorded <= step)  # the snapshot shown
        heatmap.update(run.snapshots[index],
                       title=f"$A$ on the probe after {step} steps (on target: {run.target_weights[step]:.2f})")
        step_line.set_xdata([step, step])

    slider = int_slider("training step", 0, 0, run.steps[-1], step=step_size)
    view = LiveFigure(fig, redraw, {"step": slider}, animated=[step_line])  # redraw moves the line: repaint it alone
    view.heatmap, view.step_line = heatmap, step_line
    return view
