"""Pictures of notebook 04 (causal attention), so that each lesson cell is the idea plus one call.

* :func:`causal_explorer` is the lesson's "what may each token see?" figure: the weights ``A`` as a heatmap (the
  chosen query's row outlined) next to the bars of that row, with the keys in the query's future on a grey band.
  A toggle switches the causal mask on and off; a slider walks the query along the sentence.
* :func:`weights_side_by_side` draws two weight matrices on the same fixed 0..1 scale (before/after a change).
* :func:`mask_and_weights` draws a padded sentence's mask (future and padding in two shades) next to its weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.patches import Rectangle

from ..diagrams.masking import draw_mask
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, choice, int_slider

__all__ = ["future_weight", "causal_explorer", "weights_side_by_side", "mask_and_weights"]


def future_weight(attn_weights: torch.Tensor, query: int) -> float:
    """How much of query ``query``'s weight lies on keys after it: the sum of row ``query`` right of the diagonal."""
    return float(attn_weights[query, query + 1:].sum())


def causal_explorer(attn_weights: torch.Tensor, causal_weights: torch.Tensor, tokens: Sequence[str],
                    query: int = 2, causal: str = "on") -> LiveFigure:
    """Unmasked or causal weights ``(T, T)`` of ``tokens``, and one query's row as bars.

    Controls: ``causal`` ("on" shows ``causal_weights``, "off" shows ``attn_weights``; ``causal`` picks the
    starting state) and ``query`` (0 .. T-1).
    The returned :class:`LiveFigure` also carries ``.weights_map``, ``.query_bars`` and ``.future_label``.
    """
    tokens = list(tokens)
    num_tokens = len(tokens)
    for name, weights in (("attn_weights", attn_weights), ("causal_weights", causal_weights)):
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (num_tokens, num_tokens):
            raise ValueError(f"{name} must be a ({num_tokens}, {num_tokens}) tensor, one row per token")
    weights_by_mode = {"on": causal_weights.detach().cpu(), "off": attn_weights.detach().cpu()}
    if causal not in weights_by_mode:
        raise ValueError(f"causal must be 'on' or 'off', got {causal!r}")

    fig = new_figure(10.5, 4.2, ncols=2)
    fig.get_layout_engine().set(wspace=0.1)  # room between the colour bar and the bar chart
    heat_ax, bars_ax = fig.axes
    weights_map = Heatmap(heat_ax, weights_by_mode["on"], tokens, tokens, vmin=0.0, vmax=1.0,
                          colorbar_label="weight $a_{ij}$ (0 to 1)")
    query_bars = Bars(bars_ax, weights_by_mode["on"][0], tokens, ylabel="weight $a_{ij}$", ylim=(0.0, 1.1),
                      annotate=True)
    future_zone = bars_ax.add_patch(Rectangle((0.5, 0.0), num_tokens, 1.1, color="0.88", zorder=0))
    future_label = bars_ax.text(num_tokens - 0.6, 1.03, "", ha="right", va="center", fontsize=9)

    def redraw(causal: str, query: int) -> None:
        weights = weights_by_mode[causal]
        weights_map.update(weights, title=f"Weights $A$, causal mask {causal}")
        weights_map.outline_row(query)
        query_bars.update(weights[query], highlight=query,
                          title=f"Row {query} of $A$: query '{tokens[query]}' (red: itself)")
        future_zone.set_x(query + 0.5)  # the grey band covers the keys after the query
        future_zone.set_width(num_tokens - 1 - query)
        if query == num_tokens - 1:
            future_label.set_text("")  # the last token has no future
        else:
            state = "hidden" if causal == "on" else "seen"
            future_label.set_text(f"future: {state}, {future_weight(weights, query):.2f} of the weight")

    explorer = LiveFigure(fig, redraw, {"causal": choice("causal mask", ["on", "off"], value=causal),
                                        "query": int_slider("query position", query, 0, num_tokens - 1)})
    explorer.weights_map, explorer.query_bars, explorer.future_label = weights_map, query_bars, future_label
    return explorer


def weights_side_by_side(left: torch.Tensor, right: torch.Tensor, row_labels: Sequence[str],
                         col_labels: Sequence[str] | None = None, *,
                         titles: tuple[str, str] = ("", "")) -> CourseFigure:
    """Two weight matrices ``(rows, cols)`` next to each other, both on the fixed scale 0..1 (``nan`` cells blank)."""
    col_labels = list(row_labels) if col_labels is None else list(col_labels)
    fig = new_figure(10, 4.2, ncols=2)
    fig.get_layout_engine().set(wspace=0.08)  # room between the first colour bar and the second panel
    for ax, weights, title in zip(fig.axes[:2], (left, right), titles):
        Heatmap(ax, weights.detach().cpu(), list(row_labels), col_labels, vmin=0.0, vmax=1.0, title=title,
                colorbar_label="weight $a_{ij}$")
    return fig


def mask_and_weights(mask: torch.Tensor, weights: torch.Tensor, labels: Sequence[str], *,
                     padding: torch.Tensor | None = None, titles: tuple[str, str] = ("", "")) -> CourseFigure:
    """One sequence's bool ``mask`` ``(T, T)`` (True = hidden; ``padding`` ``(T,)`` marks padded keys, drawn
    darker) next to its weights ``(T, T)`` on the fixed scale 0..1."""
    fig = new_figure(11, 4.2, ncols=2)
    fig.get_layout_engine().set(wspace=0.08)
    mask_ax, weights_ax = fig.axes
    draw_mask(mask_ax, mask, labels, labels, title=titles[0], padding=padding)
    Heatmap(weights_ax, weights.detach().cpu(), list(labels), list(labels), vmin=0.0, vmax=1.0, title=titles[1],
            colorbar_label="weight $a_{ij}$")
    return fig
