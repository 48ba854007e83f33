"""The data flow of one self-attention layer: X -> (W_q, W_k, W_v) -> Q, K, V -> S -> A -> Z.

Every tensor is drawn as a grid with one cell per number, so the picture has the shapes the lesson computes:
``num_tokens`` rows for X, Q, K, V and Z, ``d_in`` columns for X, ``d_out`` columns for the queries and keys,
``d_v`` for the values and the context vectors, and a ``num_tokens`` x ``num_tokens`` grid for S and A. Under S, A
and Z their shapes and names: scores, attention weights, context vectors.
"""

from __future__ import annotations

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["qkv_flow_diagram"]

_FONT = 13  # names 13 pt, shapes 11 pt: readable when the picture is shrunk to notebook width


def _check_size(name: str, value, low: int = 1, high: int = 12) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must lie in [{low}, {high}] so the diagram stays readable, got {value}")


def qkv_flow_diagram(num_tokens: int = 6, d_in: int = 3, d_out: int = 2, d_v: int | None = None,
                     title: str | None = "") -> CourseFigure:
    """Draw self-attention's data flow for ``num_tokens`` tokens of width ``d_in``.

    Queries and keys have ``d_out`` columns ($d_k$); values and context vectors have ``d_v`` (default
    ``d_out``). ``title``: ``""`` (default) writes the sizes, ``None`` leaves the title out. Returns a figure
    that displays itself when a notebook cell ends with it.
    """
    d_v = d_out if d_v is None else d_v
    for name, value in (("num_tokens", num_tokens), ("d_in", d_in), ("d_out", d_out), ("d_v", d_v)):
        _check_size(name, value)
    if title == "":
        widths = f"$d_k = d_v$ = {d_out}" if d_v == d_out else f"$d_k$ = {d_out}, $d_v$ = {d_v}"
        title = f"Self-attention: $T$ = {num_tokens} tokens, $d_\\mathrm{{in}}$ = {d_in}, {widths}"
    n = num_tokens
    gap = 1.8                                   # vertical space between Q, K and V (room for their labels)
    top = 2.6 if title else 1.4                 # room for the title and the first name above a grid
    row_height = max(n, d_in)                   # one band per projection: a W grid and its output side by side
    band = [top + i * (row_height + gap) for i in range(3)]  # y of the Q, K and V bands
    x_in, x_w = 0.5, d_in + 3.0                 # X, then the three weight matrices
    x_qkv = x_w + max(d_out, d_v) + 2.6         # Q, K, V
    x_s = x_qkv + max(d_out, d_v) + 3.4         # S
    x_a = x_s + n + 4.4                         # A
    x_z = x_a + n + 3.4                         # Z
    width = x_z + d_v / 2 + max(d_v / 2, 4.0) + 1.0  # room for "context vectors" under Z
    height = band[2] + row_height + 1.4
    fig, ax = diagram_canvas(width, height)
    if title:
        label(ax, width / 2, 0.7, title, fontsize=12, fontweight="bold")

    # X, in the middle band, feeds all three projections: self-attention's Q, K and V come from one sequence.
    x_top = band[1] + (row_height - n) / 2
    _, x_mid_y = tensor_grid(ax, x_in, x_top, n, d_in, color=PALETTE["inputs"], name="X", fontsize=_FONT)
    roles = [("q", "Q", d_out, PALETTE["queries"]), ("k", "K", d_out, PALETTE["keys"]),
             ("v", "V", d_v, PALETTE["values"])]
    centres = []
    for y, (role, out_name, width_out, color) in zip(band, roles):
        w_name = f"$W_{role}$"
        w_top = y + (row_height - d_in) / 2
        _, w_mid = tensor_grid(ax, x_w, w_top, d_in, width_out, color=PALETTE["weight_matrix"], name=w_name,
                                fontsize=_FONT)
        arrow(ax, (x_in + d_in + 0.1, x_mid_y), (x_w - 0.1, w_mid))
        out_top = y + (row_height - n) / 2
        out_centre = tensor_grid(ax, x_qkv, out_top, n, width_out, color=color, name=out_name, fontsize=_FONT)
        arrow(ax, (x_w + width_out + 0.1, w_mid), (x_qkv - 0.1, out_centre[1]), f"$X W_{role}$", fontsize=11)
        centres.append(out_centre)
    (q_x, q_y), (k_x, k_y), (v_x, v_y) = centres

    # S = Q K^T, A = softmax(S / sqrt(d_k)) row by row, Z = A V.
    s_top = (q_y + k_y) / 2 - n / 2
    _, s_mid = tensor_grid(ax, x_s, s_top, n, n, color=PALETTE["scores"], name="S", fontsize=_FONT,
                          shape_text=f"({n}, {n})\nscores")
    arrow(ax, (x_qkv + d_out + 0.1, q_y), (x_s - 0.1, s_mid - 0.8))
    arrow(ax, (x_qkv + d_out + 0.1, k_y), (x_s - 0.1, s_mid + 0.8))
    label(ax, x_s - 0.85, s_mid, "$Q K^\\top$", fontsize=12)   # between the two arrowheads
    _, a_mid = tensor_grid(ax, x_a, s_top, n, n, color=PALETTE["weights"], name="A", fontsize=_FONT,
                          shape_text=f"({n}, {n})\nattention weights")
    arrow(ax, (x_s + n + 0.1, s_mid), (x_a - 0.1, a_mid), "softmax$(S/\\sqrt{d_k})$", fontsize=11)
    label(ax, (x_s + n + x_a) / 2, s_mid + 0.7, "row by row", fontsize=10, color="#525252")
    z_top = (s_mid + v_y) / 2 - n / 2
    _, z_mid = tensor_grid(ax, x_z, z_top, n, d_v, color=PALETTE["context"], name="Z", fontsize=_FONT,
                          shape_text=f"({n}, {d_v})\ncontext vectors")
    arrow(ax, (x_a + n + 0.1, a_mid + 0.8), (x_z - 0.1, z_mid - 0.5))
    arrow(ax, (x_qkv + d_v + 0.1, v_y), (x_z - 0.1, z_mid + 0.5))
    label(ax, x_z - 1.4, z_mid - 1.6, "$A V$", fontsize=12)
    return fig
