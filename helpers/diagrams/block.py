"""A GPT-style transformer, drawn bottom to top: where the course's attention sits and what surrounds it.

Token and position embeddings, then ``num_layers`` identical blocks (layer norm, causal multi-head attention, a
residual addition, layer norm, a position-wise feed-forward network, a second residual addition), a final layer
norm and a linear read-out to one score per vocabulary entry. Layer norm sits at the input of each sub-layer, as
in GPT-2 (Radford et al. 2019) and the GPT model of Raschka (2024, chapter 4); the original transformer (Vaswani et
al. 2017) normalised after each residual addition instead. The notes beside the parts say what each does and cite
where it comes from.

The sizes in the shape labels come from the arguments, e.g. GPT-2 small:
``transformer_block_diagram(num_layers=12, d_model=768, d_ff=3072, num_heads=12, vocab_size=50257)``.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.patches import Circle, FancyBboxPatch

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label

__all__ = ["transformer_block_diagram", "box"]

TOY_EDGE = "#2171b5"  # outline of the parts that notebook 08's small model has too
RESIDUAL = "#cb181d"  # the residual paths, and nothing else


def box(ax: Axes, x: float, y: float, width: float, height: float, text: str, *, color: str = "white",
        edge: str = "#525252", linewidth: float = 1.0, fontsize: float = 10,
        dashed: bool = False) -> tuple[float, float]:
    """A rounded box with its top-left corner at (x, y) and ``text`` centred in it; return its centre."""
    ax.add_patch(FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0,rounding_size=0.25",
                                facecolor=color, edgecolor=edge, linewidth=linewidth,
                                linestyle="--" if dashed else "-"))
    if text:
        label(ax, x + width / 2, y + height / 2, text, fontsize=fontsize)
    return x + width / 2, y + height / 2


def _plus(ax: Axes, x: float, y: float, radius: float = 0.45) -> None:
    ax.add_patch(Circle((x, y), radius, facecolor="white", edgecolor="#252525", linewidth=1.2))
    label(ax, x, y - 0.03, "+", fontsize=13)


def _residual(ax: Axes, start_y: float, plus_y: float, x_main: float, x_side: float) -> None:
    """The skip path: leave the main line at ``start_y``, run up the side, join the addition at ``plus_y``."""
    ax.plot([x_main, x_side, x_side], [start_y, start_y, plus_y], color=RESIDUAL, linewidth=1.5)
    arrow(ax, (x_side, plus_y), (x_main - 0.45, plus_y), color=RESIDUAL)


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def transformer_block_diagram(num_layers: int = 12, d_model: int = 768, d_ff: int = 3072, num_heads: int = 12,
                              vocab_size: int = 50257) -> CourseFigure:
    """The data flow of a GPT-style model; the attention built in notebooks 01-07 is filled yellow.

    Parts that notebook 08's small model has too are outlined blue (its attention is the same layer without the
    causal mask).

    Args:
        num_layers: how many times the block is repeated.
        d_model: width of every token vector between the blocks.
        d_ff: width of the feed-forward network's hidden layer (4 x ``d_model`` in GPT-2).
        num_heads: heads of the attention layer (``H``).
        vocab_size: number of logits per position at the output.
    """
    _check_sizes(num_layers=num_layers, d_model=d_model, d_ff=d_ff, num_heads=num_heads, vocab_size=vocab_size)
    fig, ax = diagram_canvas(32, 31.0)
    left, width, mid = 2.0, 12.0, 8.0
    side = 1.0  # x of the residual paths
    notes = 15.3  # x where the notes on the right start
    text_size = 12
    note = dict(fontsize=text_size, ha="left", color="#252525")
    toy = dict(edge=TOY_EDGE, linewidth=3.0)

    # Key: what the blue outline and the yellow fill mean.
    ax.plot([notes, notes + 1.4], [0.9, 0.9], color=TOY_EDGE, linewidth=3.0)
    label(ax, notes + 1.8, 0.9, "outlined blue: our toy model (section 3) has this part too", **note)
    box(ax, notes, 1.5, 1.4, 0.8, "", color=PALETTE["weights"])
    label(ax, notes + 1.8, 1.9, "filled yellow: the attention of notebooks 01-07", **note)

    # Top: the output layer and the final norm (the model is read from the bottom up).
    label(ax, mid, 0.8, f"$(B, T, {vocab_size})$: one logit per vocabulary entry", fontsize=text_size)
    arrow(ax, (mid, 2.6), (mid, 1.4))
    box(ax, left, 2.6, width, 1.8, f"read-out $W_\\mathrm{{unembed}}$, ${d_model} \\to {vocab_size}$",
        fontsize=text_size, **toy)
    arrow(ax, (mid, 5.4), (mid, 4.4))
    box(ax, left, 5.4, width, 1.2, "final layer norm", fontsize=text_size)
    label(ax, notes, 3.6, "GPT-2 reuses the token embedding's matrix here,", **note)
    label(ax, notes, 4.5, "transposed, without a bias; our toy model's read-out", **note)
    label(ax, notes, 5.4, "has a matrix and a bias of its own", **note)
    arrow(ax, (mid, 9.05), (mid, 6.6))

    # The repeated block.
    box(ax, 0.2, 7.6, 14.6, 17.8, "", dashed=True, edge="#737373")
    label(ax, 13.9, 8.4, f"$\\times\\,{num_layers}$", fontsize=15, fontweight="bold", ha="right")
    _plus(ax, mid, 9.5)
    arrow(ax, (mid, 10.9), (mid, 9.95))
    box(ax, left, 10.9, width, 2.8,
        f"feed-forward, each position alone:\nlinear ${d_model} \\to {d_ff}$, GELU,\nlinear ${d_ff} \\to {d_model}$",
        fontsize=text_size - 0.5)
    arrow(ax, (mid, 14.7), (mid, 13.7))
    box(ax, left, 14.7, width, 1.2, "layer norm", fontsize=text_size)
    _residual(ax, 16.4, 9.5, mid, side)
    arrow(ax, (mid, 17.15), (mid, 15.9))
    _plus(ax, mid, 17.6)
    arrow(ax, (mid, 19.0), (mid, 18.05))
    box(ax, left, 19.0, width, 2.2, f"causal multi-head attention, $H = {num_heads}$\n(our toy model: no causal mask)",
        color=PALETTE["weights"], fontsize=text_size, **toy)
    arrow(ax, (mid, 22.2), (mid, 21.2))
    box(ax, left, 22.2, width, 1.2, "layer norm", fontsize=text_size)
    _residual(ax, 24.6, 17.6, mid, side)
    arrow(ax, (mid, 25.8), (mid, 23.4))
    label(ax, notes, 9.5, f"each block keeps the shape $(B, T, {d_model})$, so blocks stack", **note)
    label(ax, notes, 10.9, "transforms each token vector on its own: the same", **note)
    label(ax, notes, 11.8, "two-layer network at every position; GELU is a smooth", **note)
    label(ax, notes, 12.7, "curve close to ReLU (Hendrycks and Gimpel 2016)", **note)
    label(ax, notes, 15.3, "red paths: residual connections; each sub-layer", **note)
    label(ax, notes, 16.2, "adds its output to its input (He et al. 2016)", **note)
    label(ax, notes, 19.7, "mixes information across tokens: the only", **note)
    label(ax, notes, 20.6, "place where token $i$ reads the other tokens", **note)
    label(ax, notes, 22.1, "layer norm: each token vector rescaled to mean 0,", **note)
    label(ax, notes, 23.0, "variance 1, then a learned scale and shift (Ba et al. 2016);", **note)
    label(ax, notes, 23.9, "the original transformer (Vaswani et al. 2017) put it", **note)
    label(ax, notes, 24.8, "after each addition, GPT-2 before each sub-layer", **note)

    # Bottom: token ids -> embeddings (+ positions).
    label(ax, mid, 26.1, f"$(B, T, {d_model})$", fontsize=text_size - 1, color="#525252")
    box(ax, left, 26.6, width, 2.0, "token embedding\n+ position embedding", color="white", fontsize=text_size,
        **toy)
    arrow(ax, (mid, 29.7), (mid, 28.6))
    label(ax, mid, 30.3, "token ids  $(B, T)$", fontsize=text_size)
    label(ax, notes, 27.0, "positions: one learned vector per position, added", **note)
    label(ax, notes, 27.9, "to the token's (GPT-2, and our toy model)", **note)
    return fig
