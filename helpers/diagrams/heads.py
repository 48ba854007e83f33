"""Split the heads, attend in each, merge them back: the reshapes of multi-head attention as a picture.

:func:`split_heads_diagram` draws one sequence of the batch on its way through the split-head layer:

    (B, T, d_out) -view-> (B, T, H, D) -transpose(1, 2)-> (B, H, T, D) -attention in each head->
    (B, H, T, D) -transpose(1, 2), reshape-> (B, T, d_out) -W_o-> (B, T, d_out)

with the sizes taken from its arguments, so the picture always has as many tokens, features and heads as the
lesson's tensors. Each head's slice of features keeps one shade all the way, so the eye can follow it.
"""

from __future__ import annotations

from matplotlib.colors import to_rgb
from matplotlib.patches import Rectangle

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label

__all__ = ["split_heads_diagram"]

_DECK_STEP = 0.9   # how far each further head's card sits behind the one in front (cell units)
_HEAD_GAP = 0.6    # gap between the heads' slices once the view has made them an axis of their own


def _shade(color: str, head: int, num_heads: int) -> tuple[float, float, float]:
    """``color`` darkened a little more for each further head (head 0: the palette colour itself)."""
    factor = 1.0 - 0.45 * head / max(num_heads - 1, 1)
    return tuple(channel * factor for channel in to_rgb(color))


def _cells(ax, x: float, y: float, rows: int, cols: int, color, *, zorder: float = 1.0) -> None:
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(Rectangle((x + c, y + r), 1, 1, facecolor=color, edgecolor="#525252", linewidth=0.7,
                                   zorder=zorder))


def _sliced(ax, x: float, y: float, num_tokens: int, num_heads: int, head_dim: int, base: str, *,
            gap: float = 0.0, name: str = "", shape_text: str = "", head_labels: bool = True,
            fontsize: float = 10) -> float:
    """A (T, H*D) tensor drawn token by token, head h's slice in its own shade, ``gap`` between slices.

    Returns the width drawn (cell units).
    """
    width = num_heads * head_dim + (num_heads - 1) * gap
    for h in range(num_heads):
        left = x + h * (head_dim + gap)
        _cells(ax, left, y, num_tokens, head_dim, _shade(base, h, num_heads))
        if head_labels:
            label(ax, left + head_dim / 2, y - 0.45, f"head {h}", fontsize=fontsize * 0.8, color="#525252")
    if name:
        label(ax, x + width / 2, y - 1.5, name, fontsize=fontsize, fontweight="bold")
    if shape_text:
        label(ax, x + width / 2, y + num_tokens + 0.75, shape_text, fontsize=fontsize * 0.9, color="#525252")
    return width


def _deck(ax, x: float, y: float, num_tokens: int, num_heads: int, head_dim: int, base: str, *,
          name: str = "", shape_text: str = "", fontsize: float = 10) -> tuple[float, float]:
    """H cards of (T, D), head 0 in front (bottom left), further heads behind it. Returns (width, height)."""
    for h in reversed(range(num_heads)):  # back cards first, so head 0 is drawn on top
        left, top = x + h * _DECK_STEP, y + (num_heads - 1 - h) * _DECK_STEP
        _cells(ax, left, top, num_tokens, head_dim, _shade(base, h, num_heads), zorder=1 + (num_heads - h) * 0.01)
        # to the left of the card's top row, the one row of a card behind that stays in view
        label(ax, left - 0.2, top + 0.45, f"head {h}", fontsize=fontsize * 0.8, color="#525252", ha="right")
    width = head_dim + (num_heads - 1) * _DECK_STEP
    height = num_tokens + (num_heads - 1) * _DECK_STEP
    if name:
        label(ax, x + width / 2, y - 1.2, name, fontsize=fontsize, fontweight="bold")
    if shape_text:
        label(ax, x + head_dim / 2, y + height + 0.75, shape_text, fontsize=fontsize * 0.9, color="#525252")
    return width, height


def _axis_labels(ax, x: float, y: float, rows: int, cols: int, fontsize: float) -> None:
    """Name the axes of a flat (T, d_out) grid: rows are tokens (numbered on the left), columns features."""
    for r in range(rows):
        label(ax, x - 0.35, y + r + 0.5, str(r), fontsize=fontsize * 0.8, color="#525252", ha="right")
    label(ax, x - 1.5, y + rows / 2, "token", fontsize=fontsize * 0.8, color="#525252", rotation=90)
    label(ax, x + cols / 2, y + rows + 1.6, "features →", fontsize=fontsize * 0.8, color="#525252")


def split_heads_diagram(num_tokens: int = 6, d_out: int = 12, num_heads: int = 3,
                        fontsize: float = 10) -> CourseFigure:
    """The split-heads reshape, the attention in each head and the merge, for one sequence of the batch.

    Args:
        num_tokens: ``T``, rows of every tensor.
        d_out: width of the queries (and of the layer's output), split into ``num_heads`` slices.
        num_heads: ``H``; ``head_dim = d_out // num_heads`` must come out whole.

    Top row, left to right: the queries ``Q`` ``(T, d_out)``; ``view`` to ``(T, H, D)`` (the same numbers, the
    heads' slices now an axis of their own); ``transpose(1, 2)`` to ``(H, T, D)``, drawn as a deck of H
    ``(T, D)`` cards, one per head. Down the right: attention inside each head. Bottom row, right to left: the
    heads' context vectors, ``transpose(1, 2)`` and ``reshape`` (a copy) back to ``(T, d_out)`` (the heads side by side),
    and ``W_o`` (``out_proj``) that mixes them.
    """
    for name, value in (("num_tokens", num_tokens), ("d_out", d_out), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if d_out % num_heads:
        raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out}, num_heads={num_heads}")
    head_dim = d_out // num_heads
    T, H, D = num_tokens, num_heads, head_dim
    fs = fontsize
    gap_arrow = 6.5                                    # room for an arrow and its label
    sliced_w = H * D + (H - 1) * _HEAD_GAP
    deck_w, deck_h = D + (H - 1) * _DECK_STEP, T + (H - 1) * _DECK_STEP

    # --- top row: split ---------------------------------------------------------------------------------------
    top = 3.0
    x0 = 2.2                                           # room on the left for the rows' label
    width = x0 + d_out + gap_arrow + sliced_w + gap_arrow + deck_w + 5.0
    row_gap = 6.0
    height = top + deck_h + row_gap + deck_h + 5.0
    fig, ax = diagram_canvas(width, height, inches_per_unit=0.3)

    y_q = top + (deck_h - T)                          # the flat tensors sit level with the deck's front card
    _sliced(ax, x0, y_q, T, H, D, PALETTE["queries"], name="queries $Q$",
            shape_text=f"(B, T, d_out) = (B, {T}, {d_out})", fontsize=fs)
    _axis_labels(ax, x0, y_q, T, d_out, fs)
    x1 = x0 + d_out + gap_arrow
    mid_y = y_q + T / 2
    arrow(ax, (x0 + d_out + 0.4, mid_y), (x1 - 0.4, mid_y), "view", fontsize=fs)
    _sliced(ax, x1, y_q, T, H, D, PALETTE["queries"], gap=_HEAD_GAP, name="same numbers, heads apart",
            shape_text=f"(B, T, H, D) = (B, {T}, {H}, {D})", fontsize=fs)
    x2 = x1 + sliced_w + gap_arrow
    arrow(ax, (x1 + sliced_w + 0.4, mid_y), (x2 - 0.4, mid_y), "transpose(1, 2)", fontsize=fs)
    _deck(ax, x2, top, T, H, D, PALETTE["queries"], name="one $(T, d_\\mathrm{head})$ matrix per head",
          shape_text=f"(B, H, T, D) = (B, {H}, {T}, {D})", fontsize=fs)

    # --- down the right: attention inside each head ----------------------------------------------------------
    bottom = top + deck_h + row_gap
    x_arrow = x2 + D / 2
    arrow(ax, (x_arrow, top + deck_h + 1.4), (x_arrow, bottom - 1.6), "", fontsize=fs)
    label(ax, x_arrow - 0.6, top + deck_h + row_gap / 2 - 0.1,
          "attention in each head h:  $Z_h = \\mathrm{softmax}(Q_h K_h^\\top / \\sqrt{d_\\mathrm{head}})\\, V_h$"
          "\n(keys and values are split the same way; causal mask as before)",
          fontsize=fs * 0.9, ha="right")

    # --- bottom row, right to left: merge -----------------------------------------------------------------------
    _deck(ax, x2, bottom, T, H, D, PALETTE["context"], name="context vectors per head",
          shape_text=f"(B, H, T, D) = (B, {H}, {T}, {D})", fontsize=fs)
    y_z = bottom + (deck_h - T)
    mid_z = y_z + T / 2
    # two lines: one line would run into the deck's front card
    arrow(ax, (x2 - 0.4, mid_z), (x1 + d_out + 0.4, mid_z), "transpose(1, 2),\nreshape", fontsize=fs)
    _sliced(ax, x1, y_z, T, H, D, PALETTE["context"], name="heads side by side",
            shape_text=f"(B, T, d_out) = (B, {T}, {d_out})", fontsize=fs)
    arrow(ax, (x1 - 0.4, mid_z), (x0 + d_out + 0.4, mid_z), "$W_o$ (out_proj)", fontsize=fs)
    _cells(ax, x0, y_z, T, d_out, PALETTE["context"])
    _axis_labels(ax, x0, y_z, T, d_out, fs)
    label(ax, x0 + d_out / 2, y_z - 1.5, "output", fontsize=fs, fontweight="bold")
    label(ax, x0 + d_out / 2, y_z + T + 0.75, f"(B, T, d_out) = (B, {T}, {d_out})", fontsize=fs * 0.9,
          color="#525252")
    label(ax, x0 + d_out / 2, y_z - 0.45, "every feature mixes all heads", fontsize=fs * 0.8, color="#525252")
    label(ax, width / 2, height - 1.2, f"One of the B sequences (each goes the same way).  T = {T} tokens,  H = {H} "
          f"heads,  D = head_dim = d_out / H = {D}.\nOne shade per head;  in every grid, a row is a token and a column "
          f"a feature.", fontsize=fs, color="#525252")
    return fig
