"""The encoder-decoder transformer of Vaswani et al. (2017), drawn bottom to top: where each kind of attention sits.

Left, the encoder: source tokens, embeddings plus positions, then ``num_layers`` blocks of self-attention (every
source token sees every other; only the source's padding is hidden) and a feed-forward network; its output is
$Y$. Right, the decoder: the target tokens written so far, then ``num_layers`` blocks of masked self-attention
(causal: a word sees only the words before it), **cross-attention** (queries from the decoder, keys and values
from $Y$; only the source's padding is hidden) and a feed-forward network; a linear layer and a softmax give
the next word's probabilities. "Add & norm" is the paper's residual addition followed by layer normalisation;
grey arrows draw the residual paths.
"""

from __future__ import annotations

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label
from .block import box

__all__ = ["encoder_decoder_diagram"]

CROSS_EDGE = "#d94801"   # cross-attention and the arrow that feeds it Y
SKIP = "#636363"         # residual paths around each sublayer


def encoder_decoder_diagram(num_layers: int = 6, d_model: int = 512, num_heads: int = 8) -> CourseFigure:
    """Encoder (left) and decoder (right); the three attention layers are filled yellow, cross-attention outlined.

    Args:
        num_layers: how many times each block is repeated (``N = 6`` in the paper's base model).
        d_model: width of every token vector (512 in the base model).
        num_heads: heads of every attention layer (8 in the base model).
    """
    for name, value in (("num_layers", num_layers), ("d_model", d_model), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    fig, ax = diagram_canvas(38.6, 28.4)
    size = 11
    attention = dict(color=PALETTE["weights"], fontsize=size - 0.5)
    small = dict(fontsize=size - 1, color="#525252")

    # Decoder, right column, read bottom to top.
    dx, dw = 21.0, 15.0
    dmid = dx + dw / 2
    label(ax, dmid, 0.6, f"next-word probabilities $(B, T_q, \\mathrm{{vocab}})$", fontsize=size)
    box(ax, dx, 1.3, dw, 1.2, "linear, softmax", fontsize=size)
    arrow(ax, (dmid, 3.4), (dmid, 2.5))
    box(ax, dx - 0.6, 3.4, dw + 2.2, 18.7, "", dashed=True, edge="#737373")
    label(ax, dx + dw + 0.3, 4.0, f"$\\times\\,{num_layers}$", fontsize=14, fontweight="bold", ha="right")
    box(ax, dx, 4.6, dw - 2.0, 1.0, "add & norm", fontsize=size)
    arrow(ax, (dmid - 1.0, 6.4), (dmid - 1.0, 5.6))
    box(ax, dx, 6.4, dw - 2.0, 1.2, "feed-forward", fontsize=size)
    arrow(ax, (dmid - 1.0, 8.4), (dmid - 1.0, 7.6))
    box(ax, dx, 8.4, dw - 2.0, 1.0, "add & norm", fontsize=size)
    arrow(ax, (dmid - 1.0, 10.2), (dmid - 1.0, 9.4))
    box(ax, dx, 10.2, dw, 3.6, f"cross-attention, $H = {num_heads}$\nqueries: the decoder (from below)\n"
        "keys, values: $Y$ (from the encoder)", edge=CROSS_EDGE, linewidth=3.0,
        **attention)
    arrow(ax, (dmid - 1.0, 14.6), (dmid - 1.0, 13.8), "$Q$", text_offset=(-1.9, 0.45), fontsize=size + 3)  # clear of the residual line
    box(ax, dx, 14.6, dw - 2.0, 1.0, "add & norm", fontsize=size)
    arrow(ax, (dmid - 1.0, 16.4), (dmid - 1.0, 15.6))
    box(ax, dx, 16.4, dw, 3.6, f"masked self-attention, $H = {num_heads}$\nqueries, keys, values: the target",
        **attention)
    arrow(ax, (dmid, 22.9), (dmid, 20.0))
    box(ax, dx, 22.9, dw, 1.6, "embedding + positions", fontsize=size)
    arrow(ax, (dmid, 25.8), (dmid, 24.5))
    label(ax, dmid, 26.4, "target tokens written so far $(B, T_q)$", fontsize=size)
    label(ax, dmid + 0.4, 21.4, f"$(B, T_q, {d_model})$", ha="left", **small)

    # Encoder, left column.
    ex, ew = 1.0, 15.0
    emid = ex + ew / 2
    box(ax, ex, 9.6, ew, 1.6, f"$Y$: encoder output $(B, T_k, {d_model})$", color=PALETTE["inputs"], fontsize=size)
    arrow(ax, (emid, 12.2), (emid, 11.2))
    box(ax, ex - 0.6, 12.2, ew + 2.2, 9.9, "", dashed=True, edge="#737373")
    label(ax, ex + ew + 0.3, 12.8, f"$\\times\\,{num_layers}$", fontsize=14, fontweight="bold", ha="right")
    box(ax, ex, 13.4, ew - 2.0, 1.0, "add & norm", fontsize=size)
    arrow(ax, (emid - 1.0, 15.0), (emid - 1.0, 14.4))
    box(ax, ex, 15.0, ew - 2.0, 1.2, "feed-forward", fontsize=size)
    arrow(ax, (emid - 1.0, 16.8), (emid - 1.0, 16.2))
    box(ax, ex, 16.8, ew - 2.0, 1.0, "add & norm", fontsize=size)
    arrow(ax, (emid - 1.0, 18.4), (emid - 1.0, 17.8))
    box(ax, ex, 18.4, ew, 3.0, f"self-attention, $H = {num_heads}$\nqueries, keys, values: the source",
        **attention)
    arrow(ax, (emid, 22.9), (emid, 21.4))
    box(ax, ex, 22.9, ew, 1.6, "embedding + positions", fontsize=size)
    arrow(ax, (emid, 25.8), (emid, 24.5))
    label(ax, emid, 26.4, "source tokens $(B, T_k)$", fontsize=size)

    # Y feeds every decoder layer's cross-attention, as keys and values.
    ax.plot([ex + ew, 18.5, 18.5], [10.4, 10.4, 12.0], color=CROSS_EDGE, linewidth=2.0)
    arrow(ax, (18.5, 12.0), (dx, 12.0), color=CROSS_EDGE)
    label(ax, 18.5, 9.0, "$K, V$ from $Y$,\nin every layer", fontsize=size, color=CROSS_EDGE)
    label(ax, emid, 27.6, "encoder: reads the whole source", fontsize=size, fontweight="bold")
    label(ax, dmid, 27.6, "decoder: writes the target, one word at a time", fontsize=size, fontweight="bold")
    # Residual (skip) connections: each sublayer's input goes around it and is added in the "add & norm" after it.
    lane_d, lane_e = dx + dw + 0.8, ex + ew + 0.8
    for lane, start, top, end in ((lane_d, dmid, 20.6, 15.1), (lane_d, dmid - 1.0, 14.2, 8.9),
                                  (lane_d, dmid - 1.0, 8.0, 5.1), (lane_e, emid, 21.8, 17.3),
                                  (lane_e, emid - 1.0, 16.5, 13.9)):
        ax.plot([start, lane, lane], [top, top, end], color=SKIP, linewidth=1.3)
        arrow(ax, (lane, end), (lane - 2.8, end), color=SKIP)
    legend = dict(fontsize=size, ha="left")
    label(ax, ex, 0.5, "filled yellow: the three kinds of attention layer", **legend)
    label(ax, ex, 1.5, "orange: cross-attention, and $Y$ feeding its keys and values", color=CROSS_EDGE, **legend)
    label(ax, ex, 2.5, "grey arrows on the right: residual paths,\nadded back in each add & norm", color=SKIP,
          fontsize=size, ha="left", va="top")
    return fig
