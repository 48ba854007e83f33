"""Pictures of notebook 02 (softmax and context vectors).

:func:`scores_and_weights` draws a score matrix next to the weights softmax makes of it (weights on a fixed 0..1
scale). :func:`scaling_explorer` is the lesson's live figure: six random queries and keys, with controls for the
width ``d_k``, the scaling by ``sqrt(d_k)`` and the temperature ``tau`` (it can open at any setting);
:func:`demo_weights` computes what it shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, choice, float_slider, steps_slider

__all__ = ["SCALED", "UNSCALED", "scores_and_weights", "demo_inputs", "demo_weights", "explorer_title",
           "scaling_explorer"]

SCALED, UNSCALED = "divide by √d_k", "no scaling"
MAX_D_K, NUM_DEMO_TOKENS = 1024, 6


def scores_and_weights(attn_scores: torch.Tensor, attn_weights: torch.Tensor, tokens: Sequence[str]) -> CourseFigure:
    """Scores ``S`` (T, T) on the left, weights ``A`` (T, T) on the right, the weights on a fixed 0..1 scale."""
    fig = new_figure(10.5, 4.2, ncols=2)
    fig.get_layout_engine().set(wspace=0.12)  # room between the first colour bar's label and the second panel
    Heatmap(fig.axes[0], attn_scores, tokens, tokens, title="Scores $S = X X^\\top$", colorbar_label="score")
    Heatmap(fig.axes[1], attn_weights, tokens, tokens, vmin=0.0, vmax=1.0,
            title="Weights $A$ = softmax of each row (scale 0..1)", colorbar_label="attention weight")
    return fig


def demo_inputs(seed: int = 123) -> tuple[torch.Tensor, torch.Tensor]:
    """Six random queries and six random keys of width 1024 (seeded): two ``(6, 1024)`` tensors."""
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(NUM_DEMO_TOKENS, MAX_D_K, generator=generator)
    keys = torch.randn(NUM_DEMO_TOKENS, MAX_D_K, generator=generator)
    return queries, keys


def demo_weights(d_k: int, scaled: bool = True, temperature: float = 1.0,
                 inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Weights of the six demo queries for the six demo keys, first ``d_k`` components: a ``(6, 6)`` tensor.

    The softmax sees the scores divided by ``sqrt(d_k)`` if ``scaled``, and then by the temperature ``tau``.
    """
    if not isinstance(scaled, bool):
        raise TypeError(f"scaled must be True or False, got {scaled!r}")
    queries, keys = demo_inputs() if inputs is None else inputs
    attn_scores = queries[:, :d_k] @ keys[:, :d_k].T                  # (T, d_k) @ (d_k, T) -> (T, T)
    if scaled:
        attn_scores = attn_scores / math.sqrt(d_k)
    return torch.softmax(attn_scores / temperature, dim=-1)           # (T, T), rows sum to 1


def explorer_title(d_k: int, scaled: bool, temperature: float) -> str:
    """The formula the heatmap shows, with the scaling written in (or said to be off), and the settings; the
    temperature τ only where it is not 1 (at 1 it changes nothing, and the core path has not met it yet)."""
    if temperature == 1.0:
        divisor, settings = ("\\sqrt{d_k}" if scaled else ""), f"$d_k$ = {d_k}"
    else:
        divisor = "(\\sqrt{d_k}\\,\\tau)" if scaled else "\\tau"
        settings = f"$d_k$ = {d_k}, τ = {temperature:.1f}"
    formula = "$a_{ij}$ = softmax$_j(q_i \\cdot k_j" + (f" \\,/\\, {divisor}" if divisor else "") + ")$"
    return ("" if scaled else "no scaling: ") + formula + "\n" + settings


def scaling_explorer(d_k: int = 64, scaled: bool = True, temperature: float = 1.0) -> LiveFigure:
    """Query 0's weights (bars) and all six queries' weights (heatmap, fixed 0..1), with controls for ``d_k``
    (1 .. 1024), the scaling and the temperature ``tau`` (0.1 .. 5), opening at the values given. Carries its
    builders as ``.query_bars`` and ``.heatmap``."""
    inputs = demo_inputs()
    query_labels = [f"query {i}" for i in range(NUM_DEMO_TOKENS)]
    key_labels = [f"key {j}" for j in range(NUM_DEMO_TOKENS)]
    first = demo_weights(d_k, scaled, temperature, inputs)
    fig = new_figure(10, 4.0, ncols=2)
    # The demo vectors are random, not tokens: the axes name the query i and the key j.
    query_bars = Bars(fig.axes[0], first[0], key_labels, ylim=(0, 1.1), annotate=True, xlabel="key $j$",
                      reference=1 / NUM_DEMO_TOKENS,  # dashed: what uniform weights would be
                      ylabel="attention weight $a_{0j}$", title="Query 0 (row 0 of the heatmap); dashed: uniform 1/6")
    heatmap = Heatmap(fig.axes[1], first, query_labels, key_labels, vmin=0.0, vmax=1.0, xlabel="key $j$",
                      ylabel="query $i$", colorbar_label="attention weight")

    def redraw(d_k: int, scaling: str, temperature: float) -> None:
        weights = demo_weights(d_k, scaling == SCALED, temperature, inputs)  # (T, T)
        query_bars.update(weights[0])
        heatmap.update(weights, title=explorer_title(d_k, scaling == SCALED, temperature))

    explorer = LiveFigure(fig, redraw, {
        "d_k": steps_slider("d_k", [2 ** power for power in range(11)], d_k),  # 1, 2, 4, ..., 1024
        "scaling": choice("scaling", [SCALED, UNSCALED], SCALED if scaled else UNSCALED),
        "temperature": float_slider("temperature τ", temperature, 0.1, 5.0, 0.1, readout_format=".1f"),
    })
    explorer.query_bars, explorer.heatmap = query_bars, heatmap
    return explorer
