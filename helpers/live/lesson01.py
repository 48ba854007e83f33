"""Live pictures of notebook 01 (dot-product scores).

:func:`score_explorer` is the lesson's "stretch a token" figure: a heatmap of all scores ``S = X X^T`` next to
the bars of one query's row, with controls for the query, the token to stretch and the stretch factor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib import colormaps
from matplotlib.patches import Rectangle

from ..attention import dot_product_scores
from ..plotting import Bars, Heatmap, new_figure
from ..widgets import LiveFigure, choice, float_slider

__all__ = ["stretched_scores", "score_explorer"]

CMAP = "RdBu_r"          # signed scores: red above zero, blue below, white at zero
GHOST = "#252525"        # outline of the row before stretching


def stretched_scores(inputs: torch.Tensor, token_index: int, factor: float) -> torch.Tensor:
    """Scores ``S = X X^T`` after multiplying row ``token_index`` of ``inputs`` (T, d_in) by ``factor``: (T, T)."""
    vectors = inputs.clone()
    vectors[token_index] *= factor
    return dot_product_scores(vectors, vectors)  # (T, d_in) @ (d_in, T) -> (T, T)


def _text_colours(score_map: Heatmap, scores: torch.Tensor, frames: list[list[Rectangle]]) -> None:
    """White numbers on the dark ends of the colour scale, black ones on its pale middle; a number beyond the
    scale's ends (its cell only gets the end colour) is framed."""
    low, high = score_map.image.get_clim()
    for i, row in enumerate(score_map.texts):
        for j, text in enumerate(row):
            position = (float(scores[i, j]) - low) / (high - low)        # 0 .. 1 on the colour bar
            text.set_color("white" if abs(position - 0.5) > 0.3 else "black")
            frames[i][j].set_visible(not 0.0 <= position <= 1.0)


def score_explorer(inputs: torch.Tensor, tokens: Sequence[str], query: str = "journey",
                   stretch: str = "step", factor: float = 1.0) -> LiveFigure:
    """Scores of every query (heatmap, the chosen query's row outlined) and of one query (bars).

    Controls: ``query`` (whose row the bars show), ``stretch_token`` (the token whose vector is stretched) and
    ``factor`` (-4 .. 4; negative flips the vector); the arguments of the same names set where they start, so the
    picture can open in the state a question asks about. The heatmap's colours span the scores before stretching,
    symmetric about zero (a stretched score beyond them gets the end colour and a frame, its number stays exact);
    the bars show the chosen row after stretching, with the row before stretching as outlines. The returned
    :class:`LiveFigure` also carries the builders as ``.score_map`` and ``.query_bars`` and the outlines as
    ``.original_bars``, and the frames as ``.beyond_frames``.
    """
    if not -4.0 <= factor <= 4.0:
        raise ValueError(f"factor must be in [-4, 4] (the slider's range), got {factor}")
    tokens = list(tokens)
    attn_scores = dot_product_scores(inputs, inputs)  # (T, T), before any stretching
    limit = float(attn_scores.abs().max())             # colours run from -limit to +limit
    fig = new_figure(width=11, height=4.6, ncols=2)
    fig.get_layout_engine().set(wspace=0.12)  # room between the colour bar's label and the bar chart
    score_map = Heatmap(fig.axes[0], attn_scores, tokens, tokens, title="Scores $s_{ij} = x_i \\cdot x_j$",
                        cmap=CMAP, vmin=-limit, vmax=limit,
                        colorbar_label=f"score $s_{{ij}}$ (colours stop at ±{limit:.2f}; framed: beyond)",
                        value_fontsize=10)
    # One frame per cell, shown around a number beyond the colour bar's ends.
    frames = [[score_map.ax.add_patch(Rectangle((j - 0.4, i - 0.25), 0.8, 0.5, fill=False, edgecolor="white",
                                                linewidth=1.3, zorder=3.1, visible=False, animated=True))
               for j in range(len(tokens))] for i in range(len(tokens))]
    bars_ax = fig.axes[1]
    query_bars = Bars(bars_ax, attn_scores[0], tokens, ylabel="score $s_{ij}$")
    positions = range(len(tokens))
    original_bars = list(bars_ax.bar(positions, attn_scores[0].tolist(), fill=False, edgecolor=GHOST,
                                     linestyle="--", linewidth=1.4, zorder=2.5))
    bars_ax.legend([query_bars.bars[0], original_bars[0]], ["after stretching", "before stretching"],
                   loc="upper left", fontsize=9, frameon=False)

    marked = {}  # the stretched token and factor the labels show: a change of them redraws the figure in full

    def mark_stretched(stretched: int, factor: float) -> None:
        """The stretched token's labels in bold (its row's with the factor below, which keeps the width the
        first draw laid out); no mark at factor 1."""
        state = (stretched, factor) if factor != 1.0 else None
        if marked.get("state", "unset") == state:
            return
        marked["state"] = state
        for ax, axis in ((score_map.ax, "x"), (score_map.ax, "y"), (bars_ax, "x")):
            labels = [f"{token}\n×{factor:.1f}" if state and i == stretched and axis == "y" else token
                      for i, token in enumerate(tokens)]
            (ax.set_xticks if axis == "x" else ax.set_yticks)(range(len(tokens)), labels=labels)
            ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
            for i, tick in enumerate(ticks):
                tick.set_fontweight("bold" if state is not None and i == stretched else "normal")

    def redraw(query: str, stretch_token: str, factor: float) -> None:
        scores = stretched_scores(inputs, tokens.index(stretch_token), factor)
        mark_stretched(tokens.index(stretch_token), factor)
        row = tokens.index(query)
        score_map.update(scores, title=f"Scores $S$, '{stretch_token}' stretched ×{factor:.1f}")
        _text_colours(score_map, scores, frames)
        score_map.outline_row(row, color="black")  # the query row (red would vanish on red cells)
        for bar, height in zip(original_bars, attn_scores[row].tolist()):
            bar.set_height(height)
        query_bars.update(scores[row], title=f"Row {row}: query '{query}' (red: itself)", highlight=row)
        # The value axis fits both rows (zero always shows); a new range redraws the figure in full.
        heights = scores[row].tolist() + attn_scores[row].tolist()
        low, high = min(0.0, *heights), max(0.0, *heights)
        pad = 0.15 * (high - low) + 0.05
        limits = (low - (pad if low < 0 else 0.0), high + 2 * pad)  # room for the legend above the bars
        if bars_ax.get_ylim() != limits:
            bars_ax.set_ylim(*limits)

    explorer = LiveFigure(fig, redraw, {
        "query": choice("query", tokens, value=query),
        "stretch_token": choice("stretch", tokens, value=stretch),
        "factor": float_slider("stretch factor", float(factor), -4.0, 4.0, 0.1, readout_format=".1f"),
    }, animated=original_bars)
    explorer.score_map, explorer.query_bars, explorer.original_bars = score_map, query_bars, original_bars
    explorer.beyond_frames = frames
    return explorer
