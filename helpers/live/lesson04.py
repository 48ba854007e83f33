"""Pictures of notebook 04 (causal attention), so that each lesson cell is the idea plus one call.

* :func:`causal_explorer` is the lesson's "what may each token see?" figure: the weights without the mask and the
  causal weights ``A`` side by side (the chosen query's row outlined in both), and that row as bars: filled for
  ``A``, a dashed outline for the weights without the mask, the keys in the query's future on a grey band (their
  weight in ``A`` is 0, so they carry no number), on a 0..1 axis with the legend below. A slider walks the query
  along the sentence.
* :func:`weights_side_by_side` draws two weight matrices on the same fixed 0..1 scale (before/after a change).
* :func:`mask_and_weights` draws a padded sentence's mask (future and padding in two shades) next to its weights.

Every picture labels rows and columns ``i: token`` (``0: Your``), so "row 0" and "query 0" point at one place.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.patches import Patch, Rectangle

from ..diagrams.masking import draw_mask, numbered
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, int_slider

__all__ = ["future_weight", "causal_explorer", "weights_side_by_side", "mask_and_weights"]

VALUE_FONTSIZE = 10.5  # the numbers in the cells and above the bars: legible at 80 dpi


def future_weight(attn_weights: torch.Tensor, query: int) -> float:
    """How much of query ``query``'s weight lies on keys after it: the sum of row ``query`` right of the diagonal."""
    return float(attn_weights[query, query + 1:].sum())


def _weights_map(ax, weights: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str], title: str, *,
                 colorbar: bool = True, row_ticks: bool = True) -> Heatmap:
    """Weights ``(rows, cols)`` on the fixed scale 0..1, labelled ``i: token``; optionally without a colour bar
    (a neighbour carries it) or without row labels (a neighbour on the left has the same rows)."""
    heatmap = Heatmap(ax, weights.detach().cpu(), numbered(row_labels), numbered(col_labels), vmin=0.0, vmax=1.0,
                      title=title, xlabel="key $j$", ylabel="query $i$" if row_ticks else "",
                      colorbar_label="attention weight (0 to 1)", value_fontsize=VALUE_FONTSIZE)
    if not colorbar:
        heatmap.colorbar.remove()
    if not row_ticks:
        ax.tick_params(labelleft=False)
    return heatmap


def causal_explorer(unmasked_weights: torch.Tensor, causal_weights: torch.Tensor, tokens: Sequence[str],
                    query: int = 2) -> LiveFigure:
    """The weights ``(T, T)`` of ``tokens`` without the mask and with it, and one query's row of both as bars.

    Control: ``query`` (0 .. T-1). The returned :class:`LiveFigure` also carries ``.unmasked_map``,
    ``.causal_map``, ``.query_bars`` (filled: the causal row) and ``.unmasked_bars`` (dashed outlines: the row
    without the mask).
    """
    tokens = list(tokens)
    num_tokens = len(tokens)
    for name, weights in (("unmasked_weights", unmasked_weights), ("causal_weights", causal_weights)):
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (num_tokens, num_tokens):
            raise ValueError(f"{name} must be a ({num_tokens}, {num_tokens}) tensor, one row per token")
    unmasked, causal = unmasked_weights.detach().cpu(), causal_weights.detach().cpu()

    fig = new_figure(12, 4.8, ncols=3)
    unmasked_ax, causal_ax, bars_ax = fig.axes
    unmasked_map = _weights_map(unmasked_ax, unmasked, tokens, tokens, "Without the mask", colorbar=False)
    causal_map = _weights_map(causal_ax, causal, tokens, tokens, "$A$, with the causal mask", row_ticks=False)
    query_bars = Bars(bars_ax, causal[query], numbered(tokens), xlabel="key $j$", ylabel="weight",
                      ylim=(0.0, 1.08), annotate=True)   # weights lie in 0..1; the top leaves room for "1.00"
    bars_ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    for text in query_bars.texts:
        text.set_fontsize(VALUE_FONTSIZE)
    unmasked_bars = list(bars_ax.bar(range(num_tokens), unmasked[query].tolist(), width=0.8, fill=False,
                                     edgecolor="#252525", linestyle="--", linewidth=1.4, zorder=3))
    future_zone = bars_ax.add_patch(Rectangle((0.5, 0.0), num_tokens, 1.08, color="0.88", zorder=0))
    bars_ax.set_xlim(-0.6, num_tokens - 0.4)  # fixed, whatever the width of the grey band
    bars_ax.legend(handles=[Patch(facecolor="tab:blue", label="with the mask: $A$"),
                            Patch(fill=False, edgecolor="#252525", linestyle="--", label="without the mask"),
                            Patch(facecolor="0.88", label="keys after the query: 0 in $A$")],
                   loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, fontsize=9.5, frameon=False)

    def redraw(query: int) -> None:
        for heatmap in (unmasked_map, causal_map):
            heatmap.outline_row(query)
        for bar, height in zip(unmasked_bars, unmasked[query].tolist()):
            bar.set_height(height)
        future_zone.set_x(query + 0.5)  # the grey band covers the keys after the query
        future_zone.set_width(num_tokens - 1 - query)
        if query == num_tokens - 1:
            future = "no later keys: nothing to hide"
        else:
            future = f"without the mask, {future_weight(unmasked, query):.2f} on later keys"
        query_bars.update(causal[query], title=f"Row {query} ('{tokens[query]}')\n{future}")
        for key, text in enumerate(query_bars.texts):  # a hidden key's 0 is said by the band, not over its outline
            if key > query:
                text.set_text("")

    explorer = LiveFigure(fig, redraw, {"query": int_slider("query i", query, 0, num_tokens - 1)},
                          animated=[*unmasked_bars, future_zone])
    explorer.unmasked_map, explorer.causal_map = unmasked_map, causal_map
    explorer.query_bars, explorer.unmasked_bars = query_bars, unmasked_bars
    return explorer


def weights_side_by_side(left: torch.Tensor, right: torch.Tensor, row_labels: Sequence[str],
                         col_labels: Sequence[str] | None = None, *,
                         titles: tuple[str, str] = ("", "")) -> CourseFigure:
    """Two weight matrices ``(rows, cols)`` next to each other, both on the fixed scale 0..1 (``nan`` cells blank),
    with one colour bar on the right."""
    col_labels = list(row_labels) if col_labels is None else list(col_labels)
    fig = new_figure(10, 4.4, ncols=2)
    _weights_map(fig.axes[0], left, row_labels, col_labels, titles[0], colorbar=False)
    _weights_map(fig.axes[1], right, row_labels, col_labels, titles[1], row_ticks=False)
    return fig


def mask_and_weights(mask: torch.Tensor, weights: torch.Tensor, labels: Sequence[str], *,
                     padding: torch.Tensor | None = None, titles: tuple[str, str] = ("", "")) -> CourseFigure:
    """One sequence's bool ``mask`` ``(T, T)`` (True = hidden; ``padding`` ``(T,)`` marks padded keys, drawn
    darker) next to its weights ``(T, T)`` on the fixed scale 0..1."""
    fig = new_figure(11.5, 4.4, ncols=2)
    fig.get_layout_engine().set(wspace=0.08)
    mask_ax, weights_ax = fig.axes
    draw_mask(mask_ax, mask, labels, labels, title=titles[0], padding=padding)
    _weights_map(weights_ax, weights, labels, labels, titles[1])
    return fig
