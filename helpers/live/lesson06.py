"""Live pictures of notebook 06 (multi-head attention).

* :func:`head_grid`: every head's weights of one layer as small maps sharing one colour bar, one head large with
  its values; controls pick the head and the query token whose row is outlined in every map.
* :func:`num_heads_explorer`: a slider over ``num_heads`` for a layer of ``d_model`` features: which head reads
  which feature, and what the split layer costs next to heads that each get all ``d_model`` features.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from matplotlib.colors import ListedColormap

from ..heads import full_width_heads_cost, split_heads_cost
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, choice, int_slider, steps_slider

__all__ = ["heads_text", "print_table", "head_grid", "num_heads_explorer"]


def heads_text(num_heads: int) -> str:
    """``"1 head"``, ``"12 heads"``: the count with the noun in the right number."""
    return f"{num_heads} head" if num_heads == 1 else f"{num_heads} heads"


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``rows`` under ``header``: the first column left-aligned unless it holds numbers, the others right-aligned; whole numbers with
    thousands separators, other floats with two decimals."""
    def is_number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def cell(value) -> str:
        if not is_number(value):
            return str(value)
        return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"

    table = [list(header), *([cell(value) for value in row] for row in rows)]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    left = [column == 0 and not all(is_number(row[0]) for row in rows) for column in range(len(header))]
    for line in table:
        print("  ".join(text.ljust(width) if left[column] else text.rjust(width)
                        for column, (text, width) in enumerate(zip(line, widths))).rstrip())


def head_grid(head_weights: torch.Tensor, tokens: Sequence[str], *, head: int = 0, query: int = 0) -> LiveFigure:
    """All heads' weights ``(H, T, T)`` at once, and one head large with its values.

    Small maps (two per row) show every head on the fixed 0..1 scale of one shared colour bar; the ``head``
    buttons frame one of them in orange and show it large; the ``query token`` slider outlines that token's row in
    every map. The returned :class:`LiveFigure` carries ``.small_maps`` and ``.big_map`` (the builders).
    """
    weights = torch.as_tensor(head_weights).detach().to("cpu", torch.float32)
    if weights.dim() != 3 or weights.shape[1] != weights.shape[2]:
        raise ValueError(f"head_weights must have shape (H, T, T), got {tuple(weights.shape)}")
    num_heads, num_tokens, _ = weights.shape
    tokens = list(tokens)
    if len(tokens) != num_tokens:
        raise ValueError(f"tokens must have {num_tokens} entries, got {len(tokens)}")
    labels = [f"{i}:{word}" for i, word in enumerate(tokens)]  # positions keep repeated words apart
    positions = [str(i) for i in range(num_tokens)]            # inner axes of the small maps: positions only
    small_rows = math.ceil(num_heads / 2)
    fig = CourseFigure(figsize=(12, 3.2 * small_rows + 0.8), layout="constrained")
    mosaic = [[f"h{2 * r}", f"h{2 * r + 1}" if 2 * r + 1 < num_heads else ".", "big"] for r in range(small_rows)]
    axes = fig.subplot_mosaic(mosaic, width_ratios=[1, 1, 2.3])
    small_maps = []
    for h in range(num_heads):
        left, bottom = h % 2 == 0, h + 2 >= num_heads  # axis titles on the outer maps only
        small = Heatmap(axes[f"h{h}"], weights[h], positions, positions, vmin=0.0, vmax=1.0, annotate=False,
                        title=f"head {h}", xlabel="key token $j$" if bottom else "",
                        ylabel="query token $i$" if left else "")
        small.colorbar.remove()                       # one colour bar serves every map (same 0..1 scale)
        # Words on the left maps' rows (the query tokens the slider outlines); columns by position, as in the big map.
        small.ax.set_xticks(range(num_tokens), labels=positions, rotation=0, ha="center")
        small.ax.set_yticks(range(num_tokens), labels=labels if left else [""] * num_tokens)
        small.ax.tick_params(labelsize=8)
        small_maps.append(small)
    big_map = Heatmap(axes["big"], weights[head], labels, labels, vmin=0.0, vmax=1.0, fmt="{:.2f}",
                      xlabel="key token $j$", ylabel="query token $i$")
    big_map.values._prop.set_size(9)                  # the big map has room for 9-point numbers
    big_map.colorbar.remove()
    fig.colorbar(big_map.image, ax=list(axes.values()), label="attention weight $a_{ij}$, all maps (0 to 1)",
                 shrink=0.8)

    def redraw(head: str, query: int) -> None:
        selected = int(head.split()[-1])
        for h, small in enumerate(small_maps):
            for spine in small.ax.spines.values():    # an orange frame around the selected head
                spine.set_edgecolor("darkorange" if h == selected else "black")
                spine.set_linewidth(5 if h == selected else 0.8)
            small.outline_row(query)
        big_map.update(weights[selected], title=f"head {selected} (orange frame) shown large: row {query} "
                                                 f"('{tokens[query]}') outlined")
        big_map.outline_row(query)

    frames = [spine for small in small_maps for spine in small.ax.spines.values()]
    grid = LiveFigure(fig, redraw, {"head": choice("head", [f"head {h}" for h in range(num_heads)],
                                                   value=f"head {head}"),
                                    "query": int_slider("query token", query, 0, num_tokens - 1)},
                      animated=frames)  # the frames change too: repaint them with the maps, not the whole figure
    grid.small_maps, grid.big_map = small_maps, big_map
    return grid


def num_heads_explorer(d_model: int = 768, num_tokens: int = 1024, *, qkv_bias: bool = True,
                       max_heads: int = 96, value: int = 12) -> LiveFigure:
    """A ``num_heads`` slider (every divisor of ``d_model`` up to ``max_heads``) for a layer of ``d_model`` features.

    Left: which head reads which of the ``d_model`` features of one token's query (one row per head, filled
    where that head reads: more heads, thinner slices). Middle and right (linear scales, the ratio in the title): parameters (millions) and
    matrix-product GFLOPs for one sequence of ``num_tokens`` tokens, split heads next to heads that each get all
    ``d_model`` features. The returned :class:`LiveFigure` carries ``.strip_ax``, ``.params_bars`` and
    ``.flops_bars``.
    """
    head_counts = [h for h in range(1, max_heads + 1) if d_model % h == 0]
    if value not in head_counts:
        raise ValueError(f"value must divide d_model={d_model} and be at most {max_heads}, got {value}")
    fig = new_figure(12, 3.8, ncols=3)
    strip_ax, params_ax, flops_ax = list(fig.axes)
    # One row per head, one column per feature: row h is filled where head h reads (a staircase of slices).
    owner = ListedColormap(["white", "#e6550d"])   # a darker shade of the queries colour: thin slices stay visible
    strip = strip_ax.imshow(torch.zeros(1, d_model).numpy(), cmap=owner, vmin=0, vmax=1, aspect="auto",
                            interpolation="nearest")
    strip_ax.set_xticks([0, d_model // 4, d_model // 2, 3 * d_model // 4, d_model - 1])
    strip_ax.set_xlabel(f"feature of one token's query (0 … {d_model - 1})")
    strip_ax.set_ylabel("head $h$ (filled: the features it reads)")
    bar_labels = ["split heads", "full-width heads"]
    # Linear scales, so the bars show the real ratio; parameters in millions, FLOPs in GFLOPs, everywhere.
    params_bars = Bars(params_ax, [1.0, 1.0], bar_labels, xlabel="", ylabel="parameters (millions)",
                       annotate=True, fmt="{:,.2f} M")
    flops_bars = Bars(flops_ax, [1.0, 1.0], bar_labels, xlabel="",
                      ylabel=f"matrix-product GFLOPs (T = {num_tokens})", annotate=True, fmt="{:,.2f} G")
    for ax in (params_ax, flops_ax):
        ax.set_xticks(range(2), labels=bar_labels, rotation=0, ha="center")

    def redraw(num_heads: int) -> None:
        split = split_heads_cost(d_model, num_heads, num_tokens, qkv_bias=qkv_bias)
        full = full_width_heads_cost(d_model, num_heads, num_tokens, qkv_bias=qkv_bias)
        head_of_feature = torch.arange(d_model) // split.head_dim   # feature i is read by head i // head_dim
        reads = (head_of_feature[None, :] == torch.arange(num_heads)[:, None]).float()  # (H, d_model)
        strip.set_data(reads.numpy())
        strip.set_extent((-0.5, d_model - 0.5, num_heads - 0.5, -0.5))
        shown = range(num_heads) if num_heads <= 12 else range(0, num_heads, num_heads // 8)
        strip_ax.set_yticks(list(shown), labels=[str(h) for h in shown])
        strip_ax.set_title(f"{heads_text(num_heads)} × head_dim {split.head_dim} = {d_model} features")
        params_bars.update([split.parameters / 1e6, full.parameters / 1e6], highlight=1,
                           title=f"parameters: full width = {full.parameters / split.parameters:.1f} × split")
        flops_bars.update([split.flops / 1e9, full.flops / 1e9], highlight=1,
                          title=f"FLOPs: full width = {full.flops / split.flops:.1f} × split")

    explorer = LiveFigure(fig, redraw, {"num_heads": steps_slider("num_heads", head_counts, value=value)})
    explorer.strip_ax, explorer.params_bars, explorer.flops_bars = strip_ax, params_bars, flops_bars
    return explorer
