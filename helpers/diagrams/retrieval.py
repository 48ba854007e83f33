"""Attention as a soft look-up: one query compared with every key, the scores made into weights, the values mixed.

:func:`retrieval_diagram` draws the data flow for one query token, with the sizes (number of tokens, widths of keys
and values) taken from its arguments and, if given, the real numbers written into their cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.patches import Rectangle

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["retrieval_diagram"]

FONT = 12            # names of the tensors; shape texts and cell numbers are drawn a little smaller
HIGHLIGHT = "#d62728"  # the key of the query token itself
GREYED = "#404040"     # text about the part a later notebook adds (drawn above its veil)
DARK_CAPTION = "#252525"  # captions="dark": the texts under the grids, as dark as the arrows' words


def _column(values: torch.Tensor | None, rows: int) -> list[list[str]] | None:
    if values is None:
        return None
    values = torch.as_tensor(values).reshape(-1)
    if len(values) != rows:
        raise ValueError(f"expected {rows} numbers (one per token), got {len(values)}")
    return [[f"{float(v):.2f}"] for v in values]


def _row(values, width: int) -> list[list[str]]:
    values = torch.as_tensor(values).reshape(-1)
    if len(values) != width:
        raise ValueError(f"expected {width} numbers (one per component of z_i), got {len(values)}")
    return [[f"{float(v):.2f}" for v in values]]


def _cells(matrix: torch.Tensor) -> list[list[str]]:
    return [[f"{float(v):.2f}" for v in row] for row in matrix]


def _left_of_texts(ax, default: float) -> float:
    """The left edge (in cell units) of the texts drawn so far that are right-aligned: the token labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    to_data = ax.transData.inverted()
    lefts = [to_data.transform(text.get_window_extent(renderer))[:, 0].min()
             for text in ax.texts if text.get_ha() == "right"]
    return min(lefts) if lefts else default


def retrieval_diagram(tokens: Sequence[str], query_index: int, *, d_k: int | None = None, d_v: int | None = None,
                      scores=None, weights=None, inputs=None, upto: str = "context",
                      built: str | None = None, context=None, text_scale: float = 1.0,
                      captions: str = "grey") -> CourseFigure:
    """The look-up for query token ``query_index``: ``q_i`` against keys ``K``, scores ``s_i``, weights ``a_i``,
    values ``V`` and the context vector ``z_i``.

    Args:
        tokens: one label per token (``T = len(tokens)`` rows of keys and values).
        query_index: which token asks (counting from 0).
        d_k, d_v: widths of a query/key and of a value (cells per row); default: the width of ``inputs``, or 3.
        scores, weights: optional ``(T,)`` numbers written into the score and weight columns.
        inputs: optional ``(T, d_in)`` token vectors used as queries, keys and values (``q_i = k_i = v_i = x_i``,
            as in notebooks 01 and 02); their numbers are written into the cells.
        upto: ``"scores"`` stops after the scores, ``"context"`` draws the whole look-up.
        built: ``"scores"`` frames the query, keys and scores as the part built now and greys out the rest.
        context: optional ``(d_v,)`` numbers written into the context vector's cells.
        text_scale: size of every text (names, shapes, numbers in the cells, labels) relative to the default.
        captions: ``"grey"`` draws the texts under the grids (shapes, "scores", the context vector's formula)
            small and grey; ``"dark"`` draws them dark, at the size of the tensors' names.
    """
    tokens = list(tokens)
    num_tokens = len(tokens)
    if not 0 <= query_index < num_tokens:
        raise ValueError(f"query_index must be in [0, {num_tokens}), got {query_index}")
    if upto not in ("scores", "context"):
        raise ValueError(f"upto must be 'scores' or 'context', got {upto!r}")
    if built not in (None, "scores"):
        raise ValueError(f"built must be None or 'scores', got {built!r}")
    if inputs is not None:
        inputs = torch.as_tensor(inputs)
        if inputs.dim() != 2 or inputs.shape[0] != num_tokens:
            raise ValueError(f"inputs must have shape ({num_tokens}, d_in), got {tuple(inputs.shape)}")
        d_k = inputs.shape[1] if d_k is None else d_k
        d_v = inputs.shape[1] if d_v is None else d_v
        if d_k != inputs.shape[1] or d_v != inputs.shape[1]:
            raise ValueError("with inputs, queries, keys and values are the inputs: d_k and d_v equal their width")
    d_k = 3 if d_k is None else d_k
    d_v = 3 if d_v is None else d_v
    for name, width in (("d_k", d_k), ("d_v", d_v)):
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"{name} must be a positive int, got {width!r}")
    if not 0.5 <= text_scale <= 2.0:
        raise ValueError(f"text_scale must be between 0.5 and 2, got {text_scale!r}")
    if captions not in ("grey", "dark"):
        raise ValueError(f"captions must be 'grey' or 'dark', got {captions!r}")
    font = FONT * text_scale
    i = query_index
    top = 2.2 if built else 1.6                 # room for the names (and the frame's caption) above the grids
    middle = top + num_tokens / 2               # vertical centre of the keys
    query_x, keys_x = 0.3, 0.3 + d_k + 5.0      # room for the arrow and the token labels
    scores_x = keys_x + d_k + 2.4
    weights_x = scores_x + 1 + 3.0
    values_x = weights_x + 1 + 1.6
    context_x = values_x + d_v + 3.0
    width = (scores_x + 2.0) if upto == "scores" else (context_x + d_v + 0.4)
    fig, ax = diagram_canvas(width, top + num_tokens + 1.6, inches_per_unit=0.42)
    small = font * 0.85

    def grid(x, y, rows, cols, *, shape_text, **options):
        """A tensor grid with its caption below it, drawn grey by tensor_grid or dark here."""
        shown = "" if captions == "dark" else shape_text
        tensor_grid(ax, x, y, rows, cols, shape_text=shown, fontsize=font, **options)
        if captions == "dark" and shape_text:
            label(ax, x + cols / 2, y + rows + 0.3, shape_text, va="top", fontsize=font, color=DARK_CAPTION)

    grid(query_x, middle - 0.5, 1, d_k, color=PALETTE["queries"], name=f"query $q_{{{i}}}$",
         shape_text=f"'{tokens[i]}'",
         values=None if inputs is None else _cells(inputs[i:i + 1]))
    grid(keys_x, top, num_tokens, d_k, color=PALETTE["keys"], name="keys $K$",
         shape_text=f"$(T, d_k) = ({num_tokens}, {d_k})$",
         values=None if inputs is None else _cells(inputs))
    ax.add_patch(Rectangle((keys_x, top + i), d_k, 1, fill=False, edgecolor=HIGHLIGHT, linewidth=2.2))
    for j, token in enumerate(tokens):
        label(ax, keys_x - 0.25, top + j + 0.5, f"{j} {token}", ha="right", fontsize=small,
              color=HIGHLIGHT if j == i else "black")
    # The arrow ends just before the longest token label, whatever its length, not in the empty space before it.
    arrow_end = max(_left_of_texts(ax, keys_x - 2.9) - 0.15, query_x + d_k + 1.0)
    arrow(ax, (query_x + d_k, middle), (arrow_end, middle), "compare", fontsize=small)
    grid(scores_x, top, num_tokens, 1, color=PALETTE["scores"], name=f"$s_{{{i}j}}$",
         shape_text="scores", values=_column(scores, num_tokens))
    arrow(ax, (keys_x + d_k, middle), (scores_x, middle), f"$q_{{{i}}} \\cdot k_j$", fontsize=small)
    if upto == "context":
        grid(weights_x, top, num_tokens, 1, color=PALETTE["weights"], name=f"$a_{{{i}j}}$",
             shape_text="weights", values=_column(weights, num_tokens))
        arrow(ax, (scores_x + 1, middle), (weights_x, middle), "softmax", fontsize=small)
        grid(values_x, top, num_tokens, d_v, color=PALETTE["values"], name="values $V$",
             shape_text=f"$(T, d_v) = ({num_tokens}, {d_v})$",
             values=None if inputs is None else _cells(inputs))
        for j in range(num_tokens):
            label(ax, values_x - 0.8, top + j + 0.5, "×", fontsize=font)
        greyed = built == "scores"  # drawn faded: its formula goes above the veil below, large and dark
        grid(context_x, middle - 0.5, 1, d_v, color=PALETTE["context"], name=f"context $z_{{{i}}}$",
             shape_text="" if greyed else f"$\\sum_j a_{{{i}j}} v_j$",
             values=None if context is None else _row(context, d_v))
        arrow(ax, (values_x + d_v, middle), (context_x, middle), "add up", fontsize=small)
    if built == "scores":
        right = scores_x + 1.4
        ax.add_patch(Rectangle((0.1, 0.9), right - 0.1, num_tokens + 2.4, fill=False, edgecolor="#2171b5",
                               linewidth=1.6, linestyle="--"))
        label(ax, 0.3, 0.55, "built in this notebook: the scores", ha="left", fontsize=small, color="#2171b5")
        if upto == "context":
            ax.add_patch(Rectangle((right + 0.1, 0.0), width - right, top + num_tokens + 1.6, facecolor="white",
                                   edgecolor="none", alpha=0.4, zorder=5))
            label(ax, right + 0.5, 0.55, "notebook 02: weights and the blend of the values", ha="left",
                  fontsize=font * 0.9, color=GREYED, zorder=6)
            label(ax, context_x + d_v / 2, middle + 0.85, f"$z_{{{i}}} = \\sum_j \\, a_{{{i}j}} \\, v_j$", va="top",
                  fontsize=font * 1.1, color=GREYED, zorder=6)
    return fig
