"""The pictures of notebook 11 (attention at generation time): masks for queries that meet more keys, the
generation stepper (the cache grows, one new row of weights per step), and the grouped-query explorer.

Masks are drawn with the course's convention: dark = hidden (``True`` in ``M``), light = seen. Weights use
a fixed 0..1 colour scale; a blank cell is a key that does not exist yet.
"""

from __future__ import annotations

import torch
from matplotlib.patches import Patch

from ..generation import Generation, kv_cache_bytes
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, int_slider, steps_slider

__all__ = ["masks_figure", "generation_stepper", "gqa_explorer"]

_MASK_COLOURS = "Greys"


def masks_figure(masks: dict[str, torch.Tensor], ncols: int | None = None) -> CourseFigure:
    """One panel per ``{title: mask (T_q, T_k)}``, dark where hidden (``True``), light where seen.

    The ``T_q`` queries are taken to be the last tokens of the sequence: rows are labelled with their
    positions ``T_k - T_q, ..., T_k - 1``. The panels fill ``ncols`` columns (default: one row), row by row.
    """
    ncols = len(masks) if ncols is None else ncols
    if isinstance(ncols, bool) or not isinstance(ncols, int) or not 1 <= ncols <= len(masks):
        raise ValueError(f"ncols must be an int from 1 to the {len(masks)} masks, got {ncols!r}")
    nrows = -(-len(masks) // ncols)
    fig = new_figure(4.0 * ncols, 3.4 + 2.9 * (nrows - 1), ncols=ncols, nrows=nrows)
    for ax in fig.axes[len(masks):]:  # a last row that is not full
        ax.remove()
    for ax, (title, mask) in zip(fig.axes, masks.items()):
        rows, cols = mask.shape
        heatmap = Heatmap(ax, mask.float(), [f"query at {cols - rows + i}" for i in range(rows)],
                          [str(j) for j in range(cols)], title=title, xlabel="key position $j$", ylabel="",
                          cmap=_MASK_COLOURS, vmin=0.0, vmax=1.0, annotate=False)
        heatmap.colorbar.remove()
        ax.set_xticks(range(cols), labels=[str(j) for j in range(cols)], rotation=0, ha="center")
    fig.legend(handles=[Patch(facecolor="black", edgecolor="#737373", label="hidden (True)"),
                        Patch(facecolor="white", edgecolor="#737373", label="seen (False)")],
               loc="outside lower center", ncols=2, frameon=False, fontsize=10)
    return fig


def generation_stepper(result: Generation, vocab: str, step: int = 0, example: int = 0) -> LiveFigure:
    """A slider over the generation steps of ``result`` (made with a cache).

    The newest query's weights over the keys in every head; the row grows by one column a step (one new key
    in the cache), and the blank columns, labelled "not cached yet", are positions not reached yet.
    """
    if result.cache is None:
        raise ValueError("result must come from generate(..., use_cache=True)")
    num_steps = len(result.weights)
    num_prompt = result.token_ids.shape[1] - num_steps
    total = result.token_ids.shape[1] - 1  # positions that ever enter the cache
    num_heads = result.weights[0].shape[1]
    letters = [vocab[i] for i in result.token_ids[example].tolist()]
    fig = CourseFigure(figsize=(11, 3.0), layout="constrained")
    weights_ax = fig.add_subplot()
    columns = [f"{letters[j]}·{j}" for j in range(total)]
    blank = torch.full((num_heads, total), float("nan"))
    weights_map = Heatmap(weights_ax, blank, [f"head {h}" for h in range(num_heads)], columns, vmin=0.0, vmax=1.0,
                          annotate=False, xlabel="key position $j$ in the cache (token·position)",
                          ylabel="query head", colorbar_label="weight $a_{tj}$")
    weights_ax.set_facecolor("#f7f7f7")
    not_yet = weights_ax.text(0, (num_heads - 1) / 2, "not cached yet", ha="center", va="center", fontsize=11,
                              color="#525252")

    def redraw(step: int) -> None:
        num_keys = num_prompt + step  # T_k: the prompt and the tokens generated before this step
        query = num_keys - 1
        weights = blank.clone()
        weights[:, :num_keys] = result.weights[step][example].cpu()
        picked = letters[num_keys]
        weights_map.update(weights, title=f"Step {step}: the query at position $t$ = {query} ({letters[query]}) "
                                          f"meets $T_k$ = {num_keys} keys and picks {picked}")
        shown = [label if j < num_keys else "" for j, label in enumerate(columns)]  # no letters before they exist
        weights_ax.set_xticklabels(shown)
        not_yet.set_x((num_keys - 0.5 + total - 0.5) / 2)   # centred on the blank columns, if any are left
        not_yet.set_visible(num_keys < total)

    return LiveFigure(fig, redraw, {"step": int_slider("generation step", step, 0, num_steps - 1)})


def gqa_explorer(name: str, num_layers: int, num_heads: int, head_dim: int, d_model: int, num_tokens: int,
                 num_kv_heads: int | None = None, bytes_per_value: int = 2) -> LiveFigure:
    """A slider over the divisors of ``num_heads``: which key/value head each query head reads, and what a
    KV cache of ``num_tokens`` tokens and one layer's attention parameters cost at every ``num_kv_heads``."""
    divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if num_kv_heads not in divisors:
        raise ValueError(f"num_kv_heads must divide num_heads={num_heads}, got {num_kv_heads}")
    cache_gib = [kv_cache_bytes(num_layers, d, head_dim, num_tokens, bytes_per_value) / 2**30 for d in divisors]
    params_m = [(2 * d_model * num_heads * head_dim + 2 * d_model * d * head_dim) / 1e6 for d in divisors]
    fig = CourseFigure(figsize=(12, 5.6), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(0.55, 1.7))
    map_ax = fig.add_subplot(grid[0, :])
    cache_ax, params_ax = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    head_map = Heatmap(map_ax, torch.zeros(1, num_heads), ["KV head"], [str(h) for h in range(num_heads)],
                       cmap="tab10", vmin=-0.5, vmax=9.5, fmt="{:.0f}", xlabel="query head $h$", ylabel="",
                       value_fontsize=10)
    head_map.colorbar.remove()
    map_ax.set_xticks(range(num_heads), labels=[str(h) for h in range(num_heads)], rotation=0, ha="center",
                      fontsize=10)
    map_ax.tick_params(axis="y", labelsize=10)
    real = divisors.index(num_kv_heads)  # the model's own H_kv, marked on both bar charts
    labels = [str(d) for d in divisors]
    cache_bars = Bars(cache_ax, cache_gib, labels, xlabel="$H_{kv}$", ylabel="GiB per sequence",
                      ylim=(0, max(cache_gib) * 1.3), annotate=True, fmt="{:.2f}")
    params_bars = Bars(params_ax, params_m, labels, xlabel="$H_{kv}$", ylabel="millions, one layer",
                       ylim=(0, max(params_m) * 1.3), annotate=True, fmt="{:.1f}")
    for ax, values in ((cache_ax, cache_gib), (params_ax, params_m)):
        ax.set_xticks(range(len(divisors)), labels=labels, rotation=0, ha="center")
        ax.annotate(f"real: $H_{{kv}}$ = {num_kv_heads}", (real, values[real]), xytext=(0, 14),
                    textcoords="offset points", ha="center", va="bottom", fontsize=9, color="#b30000")

    def redraw(num_kv_heads: int) -> None:
        group = num_heads // num_kv_heads
        kv_head = (torch.arange(num_heads) // group).float()[None, :]  # (1, H): h // G
        head_map.update(kv_head % 10, title=f"{name}: $H$ = {num_heads} query heads, $H_{{kv}}$ = {num_kv_heads}, "
                                            f"G = {group}: query head $h$ reads key/value head $h$ // {group}")
        for text, value in zip(head_map.values.cells[0], kv_head[0].tolist()):
            text.set_text(f"{value:.0f}")
            text.set_color("black")
        index = divisors.index(num_kv_heads)
        cache_bars.update(cache_gib, highlight=index,
                          title=f"KV cache, {num_tokens:,} tokens, {8 * bytes_per_value}-bit: "
                                f"{cache_gib[index]:.2f} GiB")
        params_bars.update(params_m, highlight=index,
                           title=f"Attention parameters per layer: {params_m[index]:.1f} M")

    return LiveFigure(fig, redraw, {"num_kv_heads": steps_slider("key/value heads H_kv", divisors, num_kv_heads)})
