"""Live pictures of notebook 04 (causal attention).

:func:`causal_explorer` is the lesson's "what may each token see?" figure: the weights ``A`` as a heatmap (the
chosen query's row outlined) next to the bars of that row, with the keys in the query's future on a grey band.
A toggle switches the causal mask on and off; a slider walks the query along the sentence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.patches import Rectangle

from ..plotting import Bars, Heatmap, new_figure
from ..widgets import LiveFigure, choice, int_slider

__all__ = ["future_weight", "causal_explorer"]


def future_weight(attn_weights: torch.Tensor, query: int) -> float:
    """How much of query ``query``'s weight lies on keys after it: the sum of row ``query`` right of the diagonal."""
    return float(attn_weights[query, query + 1:].sum())


def causal_explorer(attn_weights: torch.Tensor, causal_weights: torch.Tensor, tokens: Sequence[str],
                    query: int = 2) -> LiveFigure:
    """Unmasked or causal weights ``(T, T)`` of ``tokens``, and one query's row as bars.

    Controls: ``causal`` ("on" shows ``causal_weights``, "off" shows ``attn_weights``) and ``query`` (0 .. T-1).
    The returned :class:`LiveFigure` also carries ``.weights_map``, ``.query_bars`` and ``.future_label``.
    """
    tokens = list(tokens)
    num_tokens = len(tokens)
    for name, weights in (("attn_weights", attn_weights), ("causal_weights", causal_weights)):
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (num_tokens, num_tokens):
            raise ValueError(f"{name} must be a ({num_tokens}, {num_tokens}) tensor, one row per token")
    weights_by_mode = {"on": causal_weights.detach().cpu(), "off": attn_weights.detach().cpu()}

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

    explorer = LiveFigure(fig, redraw, {"causal": choice("causal mask", ["on", "off"]),
                                        "query": int_slider("query position", query, 0, num_tokens - 1)})
    explorer.weights_map, explorer.query_bars, explorer.future_label = weights_map, query_bars, future_label
    return explorer
