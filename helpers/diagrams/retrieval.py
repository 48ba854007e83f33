"""Attention as a soft look-up: one query compared with every key, the scores made into weights, the values mixed.

:func:`retrieval_diagram` draws the data flow for one query token, with the sizes (number of tokens, widths of keys
and values) taken from its arguments and, if given, the real scores and weights written into their cells.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["retrieval_diagram"]


def _column(values: torch.Tensor | None, rows: int) -> list[list[str]] | None:
    if values is None:
        return None
    values = torch.as_tensor(values).reshape(-1)
    if len(values) != rows:
        raise ValueError(f"expected {rows} numbers (one per token), got {len(values)}")
    return [[f"{float(v):.2f}"] for v in values]


def retrieval_diagram(tokens: Sequence[str], query_index: int, *, d_k: int = 3, d_v: int = 3,
                      scores=None, weights=None, upto: str = "context") -> CourseFigure:
    """The look-up for query token ``query_index``: ``q_i`` against keys ``K``, scores ``s_i``, weights ``a_i``,
    values ``V`` and the context vector ``z_i``.

    Args:
        tokens: one label per token (``T = len(tokens)`` rows of keys and values).
        query_index: which token asks (counting from 0).
        d_k, d_v: widths of a query/key and of a value (cells per row).
        scores, weights: optional ``(T,)`` numbers written into the score and weight columns.
        upto: ``"scores"`` stops after the scores (notebook 01), ``"context"`` draws the whole look-up.
    """
    tokens = list(tokens)
    num_tokens = len(tokens)
    if not 0 <= query_index < num_tokens:
        raise ValueError(f"query_index must be in [0, {num_tokens}), got {query_index}")
    if upto not in ("scores", "context"):
        raise ValueError(f"upto must be 'scores' or 'context', got {upto!r}")
    for name, width in (("d_k", d_k), ("d_v", d_v)):
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"{name} must be a positive int, got {width!r}")
    i = query_index
    top = 1.6                                   # room for the names above the grids
    middle = top + num_tokens / 2               # vertical centre of the keys
    query_x, keys_x = 0.3, 0.3 + d_k + 4.6      # 4.6 units for the arrow and the token labels
    scores_x = keys_x + d_k + 2.2
    weights_x = scores_x + 1 + 2.2
    values_x = weights_x + 1 + 1.6
    context_x = values_x + d_v + 3.0
    width = (scores_x + 2.0) if upto == "scores" else (context_x + d_v + 0.4)
    fig, ax = diagram_canvas(width, top + num_tokens + 1.4, inches_per_unit=0.36)

    tensor_grid(ax, query_x, middle - 0.5, 1, d_k, color=PALETTE["queries"], name=f"query $q_{{{i}}}$",
                shape_text=f"'{tokens[i]}'")
    tensor_grid(ax, keys_x, top, num_tokens, d_k, color=PALETTE["keys"], name="keys $K$",
                shape_text=f"$(T, d_k) = ({num_tokens}, {d_k})$")
    for j, token in enumerate(tokens):
        label(ax, keys_x - 0.25, top + j + 0.5, f"{j} {token}", ha="right", fontsize=9)
    arrow(ax, (query_x + d_k, middle), (keys_x - 2.4, middle), "compare")
    tensor_grid(ax, scores_x, top, num_tokens, 1, color=PALETTE["scores"], name=f"$s_{{{i}j}}$",
                shape_text="scores", values=_column(scores, num_tokens), fontsize=9)
    arrow(ax, (keys_x + d_k, middle), (scores_x, middle), f"$q_{{{i}}} \\cdot k_j$")
    if upto == "context":
        tensor_grid(ax, weights_x, top, num_tokens, 1, color=PALETTE["weights"], name=f"$a_{{{i}j}}$",
                    shape_text="weights", values=_column(weights, num_tokens), fontsize=9)
        arrow(ax, (scores_x + 1, middle), (weights_x, middle), "softmax")
        tensor_grid(ax, values_x, top, num_tokens, d_v, color=PALETTE["values"], name="values $V$",
                    shape_text=f"$(T, d_v) = ({num_tokens}, {d_v})$")
        for j in range(num_tokens):
            label(ax, values_x - 0.8, top + j + 0.5, "×", fontsize=10)
        tensor_grid(ax, context_x, middle - 0.5, 1, d_v, color=PALETTE["context"], name=f"context $z_{{{i}}}$",
                    shape_text=f"$\\sum_j a_{{{i}j}} v_j$")
        arrow(ax, (values_x + d_v, middle), (context_x, middle), "add up")
    return fig
