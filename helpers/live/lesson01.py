"""Live pictures of notebook 01 (dot-product scores).

:func:`score_explorer` is the lesson's "stretch a token" figure: a heatmap of all scores ``S = X X^T`` next to
the bars of one query's row, with controls for the query, the token to stretch and the stretch factor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..attention import dot_product_scores
from ..plotting import Bars, Heatmap, new_figure
from ..widgets import LiveFigure, choice, float_slider

__all__ = ["stretched_scores", "score_explorer"]


def stretched_scores(inputs: torch.Tensor, token_index: int, factor: float) -> torch.Tensor:
    """Scores ``S = X X^T`` after multiplying row ``token_index`` of ``inputs`` (T, d_in) by ``factor``: (T, T)."""
    vectors = inputs.clone()
    vectors[token_index] *= factor
    return dot_product_scores(vectors, vectors)  # (T, d_in) @ (d_in, T) -> (T, T)


def score_explorer(inputs: torch.Tensor, tokens: Sequence[str], query: str = "journey",
                   stretch: str = "step", factor: float = 1.0) -> LiveFigure:
    """Scores of every query (heatmap, the chosen query's row outlined) and of one query (bars).

    Controls: ``query`` (whose row the bars show), ``stretch_token`` (the token whose vector is stretched) and
    ``factor`` (-4 .. 4; negative flips the vector); the arguments of the same names set where they start, so the
    picture can open in the state a question asks about. The returned :class:`LiveFigure` also carries the two
    builders as ``.score_map`` and ``.query_bars``.
    """
    if not -4.0 <= factor <= 4.0:
        raise ValueError(f"factor must be in [-4, 4] (the slider's range), got {factor}")
    tokens = list(tokens)
    attn_scores = dot_product_scores(inputs, inputs)  # (T, T)
    fig = new_figure(width=10, height=4.2, ncols=2)
    fig.get_layout_engine().set(wspace=0.12)  # room between the colour bar's label and the bar chart
    score_map = Heatmap(fig.axes[0], attn_scores, tokens, tokens, title="Scores $s_{ij} = x_i \\cdot x_j$",
                        colorbar_label="score $s_{ij}$")
    query_bars = Bars(fig.axes[1], attn_scores[0], tokens, ylabel="score")

    def redraw(query: str, stretch_token: str, factor: float) -> None:
        scores = stretched_scores(inputs, tokens.index(stretch_token), factor)
        row = tokens.index(query)
        score_map.update(scores, title=f"Scores $S$, '{stretch_token}' stretched x{factor:.1f}")
        score_map.outline_row(row)
        # The value axis follows the scores (zero always shows), so this view redraws in full.
        query_bars.update(scores[row], title=f"Row {row}: query '{query}' (red: itself)", highlight=row)

    explorer = LiveFigure(fig, redraw, {
        "query": choice("query", tokens, value=query),
        "stretch_token": choice("stretch", tokens, value=stretch),
        "factor": float_slider("stretch factor", float(factor), -4.0, 4.0, 0.1, readout_format=".1f"),
    })
    explorer.score_map, explorer.query_bars = score_map, query_bars
    return explorer
