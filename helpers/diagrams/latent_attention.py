"""Multi-head latent attention (MLA) for one cached token, as a picture.

:func:`mla_flow_diagram` draws token ``x_j`` going down to the latent ``c_j = x_j W^{DKV}`` (``d_c`` wide) and to
the one rotary key ``k^R_j`` (``d_R`` wide) that all heads share: these two are the cache (dashed). On the right,
the naive path: every head expands ``c_j`` into its content key ``k^C_{j,h}`` and its value ``v^C_{j,h}``, and its
key is ``k^C_{j,h}`` followed by the shared ``k^R_j``. Underneath, the absorbed path: head ``h``'s content query
times ``W^{UK}_h``'s transpose is ``d_c`` wide and meets ``c_j`` itself, and its rotary query meets ``k^R_j``, so
nothing is expanded. The sizes come from the arguments; no text is smaller than 11 pt.
"""

from __future__ import annotations

from matplotlib.patches import Rectangle

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["mla_flow_diagram", "LATENT_COLOUR"]

LATENT_COLOUR = "#b3de69"   # the latent c_j: neither a key nor a value until a head expands it
_CACHE = "#3182bd"          # the dashed outline of what is cached


def mla_flow_diagram(d_in: int = 8, latent_dim: int = 4, rope_dim: int = 2, num_heads: int = 3,
                     head_dim: int = 3) -> CourseFigure:
    """One token's way through MLA: what is cached (``c_j``, ``k^R_j``), what the naive path expands, what the
    absorbed path computes instead."""
    for name, value in (("d_in", d_in), ("latent_dim", latent_dim), ("rope_dim", rope_dim),
                        ("num_heads", num_heads), ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    head_gap = 2.6
    top = 5.4                                           # first head's row
    heads_height = num_heads * head_gap
    width = d_in + latent_dim + 2 * head_dim + rope_dim + 26
    xj_y = top + heads_height / 2 - 1.2
    c_y, r_y = xj_y - 1.6, xj_y + 2.2
    # k^R_j's green wire runs under the cache box and under the heads, its labels below it: nothing touches
    green_y = max(r_y + 2.1, top + heads_height - head_gap + 1.0) + 0.5
    absorbed_top = green_y + 3.3
    height = absorbed_top + 4.0
    fig, ax = diagram_canvas(width, height)
    # the token
    tensor_grid(ax, 0.5, xj_y, 1, d_in, name="token $x_j$", shape_text=f"(1, $d_\\mathrm{{in}}$ = {d_in})",
                fontsize=12)
    # the cache: c_j and k^R_j
    cx = d_in + 7.5
    tensor_grid(ax, cx, c_y, 1, latent_dim, color=LATENT_COLOUR, name="latent $c_j$",
                shape_text=f"(1, $d_c$ = {latent_dim})", fontsize=12)
    tensor_grid(ax, cx, r_y, 1, rope_dim, color=PALETTE["keys"], name="rotary key $k^R_j$",
                shape_text=f"(1, $d_R$ = {rope_dim})", fontsize=12)
    box_left = cx - 2.2                                 # wide enough for the label "rotary key k^R_j"
    box_w = max(latent_dim, rope_dim) + 4.4
    ax.add_patch(Rectangle((box_left, c_y - 1.3), box_w, r_y - c_y + 3.4, fill=False, edgecolor=_CACHE,
                           linewidth=1.5, linestyle="--"))
    label(ax, box_left + box_w / 2, green_y + 0.5, f"cached: $d_c + d_R$ = {latent_dim + rope_dim} numbers a token",
          fontsize=11, color=_CACHE, va="top")
    arrow(ax, (0.5 + d_in, xj_y + 0.3), (cx, c_y + 0.5), "$W^{DKV}$ (down)", fontsize=11, text_offset=(-0.4, -0.1))
    arrow(ax, (0.5 + d_in, xj_y + 0.7), (cx, r_y + 0.5), "$W^{KR}$, then RoPE $R_j$", fontsize=11,
          text_offset=(-2.4, 0.75))
    # the naive path: every head's key and value
    kx = box_left + box_w + 5.0
    vx = kx + head_dim + rope_dim + 3.5
    # k^R_j goes down, under the heads, and up a green bus on the right of the keys: it crosses no label
    green_x = kx + head_dim + rope_dim + 0.8
    ax.plot([cx + rope_dim, cx + rope_dim + 0.5, cx + rope_dim + 0.5, green_x, green_x],
            [r_y + 0.5, r_y + 0.5, green_y, green_y, top + 0.5], color="#238b45", linewidth=1.0)
    for h in range(num_heads):
        y = top + h * head_gap
        tensor_grid(ax, kx, y, 1, head_dim, color=PALETTE["keys"], shape_text="")
        tensor_grid(ax, kx + head_dim, y, 1, rope_dim, color=PALETTE["keys"], shape_text="")
        ax.add_patch(Rectangle((kx + head_dim, y), rope_dim, 1, facecolor="none", edgecolor="#525252",
                               hatch="///", linewidth=0.8))
        tensor_grid(ax, vx, y, 1, head_dim, color=PALETTE["values"], shape_text="")
        label(ax, kx + (head_dim + rope_dim) / 2, y - 0.35, f"$k_{{j,{h}}} = [k^C_{{j,{h}}},\\ k^R_j]$", fontsize=11,
              va="bottom")                   # above the row: the k^R arrows come from below
        label(ax, vx + head_dim / 2, y - 0.35, f"$v^C_{{j,{h}}}$", fontsize=11, va="bottom")
        arrow(ax, (cx + latent_dim, c_y + 0.3), (kx, y + 0.5), "$W^{UK}_h$ (up)" if h == 0 else "", fontsize=11,
              text_offset=(0.0, -0.2))
        if h == 0:                           # from c_j's right edge: up, across, and down a bus beside the values
            bus_y = top - 1.6
            ax.plot([cx + latent_dim, cx + latent_dim + 0.6, cx + latent_dim + 0.6, vx - 1.2, vx - 1.2],
                    [c_y + 0.5, c_y + 0.5, bus_y, bus_y, top + (num_heads - 1) * head_gap + 0.5], color="#525252",
                    linewidth=1.0)
            ax.plot([cx + latent_dim], [c_y + 0.5], "o", color="#525252", markersize=4)   # it starts at c_j
            label(ax, vx - 1.2, bus_y - 0.3, "$W^{UV}_h$ (up)", fontsize=11, ha="center", va="bottom")   # at its bus
        arrow(ax, (vx - 1.2, y + 0.5), (vx, y + 0.5), color="#525252")
        arrow(ax, (green_x, y + 0.5), (kx + head_dim + rope_dim, y + 0.5), color="#238b45")   # into k_{j,h}'s k^R
    label(ax, kx + (head_dim + rope_dim) / 2, top - 3.5, "naive path: every head expands $c_j$", fontsize=11,
          fontweight="bold")
    label(ax, kx, green_y + 0.5, "hatched: the one $k^R_j$, shared by all heads", fontsize=11,
          color="#238b45", ha="left", va="top")
    # the absorbed path
    ay = absorbed_top
    label(ax, width / 2, ay - 0.9, "absorbed path: fold $W^{UK}_h$ into the query, meet the cache directly",
          fontsize=11, fontweight="bold")
    qx = 0.5
    tensor_grid(ax, qx, ay + 0.5, 1, head_dim, color=PALETTE["queries"], name="", shape_text=f"(1, {head_dim})",
                fontsize=12)
    label(ax, qx + head_dim / 2, ay + 0.0, "$q^C_{t,h}$", fontsize=11)
    fx = qx + head_dim + 6.0
    tensor_grid(ax, fx, ay + 0.5, 1, latent_dim, color=PALETTE["queries"], name="",
                shape_text=f"(1, $d_c$ = {latent_dim})", fontsize=12)
    label(ax, fx + latent_dim / 2, ay + 0.0, "$q^C_{t,h} {W^{UK}_h}^\\top$", fontsize=11)
    arrow(ax, (qx + head_dim, ay + 1.0), (fx, ay + 1.0), "$\\times {W^{UK}_h}^\\top$", fontsize=11)
    label(ax, fx + latent_dim + 0.5, ay + 1.0, "$\\cdot\\ c_j\\ +\\ q^R_{t,h} \\cdot k^R_j\\ ="
          " q^C_{t,h} \\cdot k^C_{j,h} + q^R_{t,h} \\cdot k^R_j$: head $h$'s score, no key expanded",
          fontsize=11, ha="left")
    label(ax, fx + latent_dim + 0.5, ay + 2.1, "$W^{UV}_h$ folds into $W_o^h$ the same way: the weights meet"
          " the latents $c_j$ themselves", fontsize=11, ha="left")
    label(ax, width / 2, 0.8, f"Multi-head latent attention for one cached token $j$ ({num_heads} heads shown)",
          fontsize=11)
    return fig
