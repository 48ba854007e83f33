"""Notebook 14's pictures: what the cache of real models costs, against the context length (live, and as a table),
and how many stored values a look-up reads back.

Each model is the keyword arguments of :func:`helpers.generation.kv_cache_bytes` that describe it (layers, heads,
windows, latent widths); neither the picture nor the table computes a byte count of its own.
"""

from __future__ import annotations

import torch

from ..generation import kv_cache_bytes
from ..plotting import CourseFigure, new_figure
from ..widgets import LiveFigure, choice, steps_slider

__all__ = ["DTYPES", "CONTEXT_LENGTHS", "print_cache_table", "cache_memory_explorer", "recall_figure"]

DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "fp32": torch.float32}
CONTEXT_LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
_METHOD_COLOURS = {"softmax": "tab:blue", "linear": "tab:orange", "delta rule": "tab:green", "least squares": "tab:red"}


def print_cache_table(models: dict[str, dict], context_limits: dict[str, int],
                      lengths: tuple[int, ...] = (1024, 4096, 32768)) -> None:
    """Print each model's cache in bf16: KiB a token, then GiB for one sequence of each of ``lengths`` tokens.

    A dash marks a length past the model's longest context (``context_limits``).
    """
    if set(context_limits) != set(models):
        raise ValueError(f"context_limits must give the longest context of every model: {list(models)}")
    print(f"{'model':<20}{'per token':>12}" + "".join(f"{f'at {t:,} tokens':>19}" for t in lengths))
    for name, spec in models.items():
        columns = [f"{kv_cache_bytes(**spec, num_tokens=t) / 2**30:>15.3f} GiB" if t <= context_limits[name]
                   else f"{'-':>19}" for t in lengths]
        print(f"{name:<20}{kv_cache_bytes(**spec) / 2**10:>8.1f} KiB" + "".join(columns))


def cache_memory_explorer(models: dict[str, dict], context_limits: dict[str, int], model: str | None = None,
                          num_tokens: int = 32768, batch_size: int = 1, dtype: str = "bf16") -> LiveFigure:
    """Toggle buttons for the model and the number format, sliders for the context length and the batch.

    Left: GiB of cache against the context length for every model up to its own longest context
    (``context_limits``), both axes logarithmic, the chosen model bold with a dot at the chosen length. Right: every
    model's cache at the chosen length, batch and format as a dot on a log axis (a dot plot: a bar's length on a log
    axis would mean nothing), in the model's line colour, the chosen one outlined in black; a model that cannot read
    that far gets no dot, only a dash. A model with a window is drawn dashed and on top, so that its line shows
    where it lies on another's; every length at which the chosen model's curve crosses another's is marked and
    written out (found exactly, token by token, with ``kv_cache_bytes``). A model whose context ends before the
    second length is one point on the left: it is labelled.
    """
    if not isinstance(models, dict) or not models:
        raise ValueError("models must be a non-empty dict {name: keyword arguments of kv_cache_bytes}")
    names = list(models)
    if set(context_limits) != set(names):
        raise ValueError(f"context_limits must give the longest context of every model: {names}")
    model = names[0] if model is None else model
    if model not in models:
        raise ValueError(f"model must be one of {names}, got {model!r}")
    if num_tokens not in CONTEXT_LENGTHS:
        raise ValueError(f"num_tokens must be one of {CONTEXT_LENGTHS}, got {num_tokens}")
    for name, spec in models.items():
        kv_cache_bytes(**spec)  # a bad description fails here, with kv_cache_bytes's own message
    fig = CourseFigure(figsize=(12, 4.6), layout="constrained")
    curve_ax, dots_ax = fig.subplots(1, 2, width_ratios=(1.2, 1))
    colours = {name: f"C{i}" for i, name in enumerate(names)}      # one colour per model, in both panels
    markers = {name: "osD^vph*XP"[i % 10] for i, name in enumerate(names)}
    grid = sorted(set(CONTEXT_LENGTHS) | {round(2 ** (10 + k / 20)) for k in range(141)})   # 1k..128k, dense
    at_marks = [grid.index(t) for t in CONTEXT_LENGTHS]
    lines = {name: curve_ax.plot(grid, [1.0] * len(grid), marker=markers[name], markersize=5, markevery=at_marks,
                                 label=name, color=colours[name],
                                 linestyle="--" if models[name].get("window_size") else "-",
                                 zorder=3 if models[name].get("window_size") else 2)[0] for name in names}
    crossing_marks, = curve_ax.plot([], [], "X", color="black", markersize=8, zorder=6)
    crossing_texts = [curve_ax.text(1.0, 1.0, "", fontsize=8, ha="left", va="top", zorder=6) for _ in range(3)]
    single = [name for name in names if context_limits[name] < CONTEXT_LENGTHS[1]]   # a curve of one point
    single_texts = {name: curve_ax.text(CONTEXT_LENGTHS[0] * 1.15, 1.0, f"{name} (context {context_limits[name]:,})",
                                        fontsize=8, va="center", color=colours[name]) for name in single}
    dot, = curve_ax.plot([num_tokens], [1.0], "o", markerfacecolor="none", markeredgecolor="black",
                         markeredgewidth=2, markersize=13, zorder=5)
    curve_ax.set_xscale("log", base=2)
    curve_ax.set_yscale("log")
    curve_ax.set_xticks(CONTEXT_LENGTHS, labels=[f"{t // 1024}k" for t in CONTEXT_LENGTHS])
    curve_ax.set_xlabel("context length $T$ (tokens)")
    curve_ax.set_ylabel("KV cache (GiB, log scale)")
    curve_ax.grid(True, which="both", alpha=0.3)
    curve_ax.legend(loc="upper left", fontsize=8)
    rows = list(range(len(names)))[::-1]                      # the first model on top
    points = {name: dots_ax.plot([1.0], [row], marker=markers[name], linestyle="none", color=colours[name],
                                 markersize=9)[0] for name, row in zip(names, rows)}
    dots_ax.set_yticks(rows, labels=names)
    dots_ax.set_ylim(-0.7, len(names) - 0.3)
    dots_ax.set_xscale("log")
    dots_ax.set_xlabel("GiB (log scale)")
    dots_ax.grid(True, which="both", axis="x", alpha=0.3)
    dots_ax.grid(True, axis="y", alpha=0.15)
    texts = [dots_ax.text(1.0, row, "", va="center", fontsize=9) for row in rows]

    def redraw(model: str, num_tokens: int, batch_size: int, dtype: str) -> None:
        def gib(name: str, tokens: int) -> float:
            return kv_cache_bytes(**models[name], num_tokens=tokens, batch_size=batch_size,
                                  dtype=DTYPES[dtype]) / 2**30
        everything = []
        for name, line in lines.items():
            values = [gib(name, t) if t <= context_limits[name] else float("nan") for t in grid]
            line.set_ydata(values)
            line.set_linewidth(3.0 if name == model else 1.2)
            line.set_alpha(1.0 if name == model else 0.6)
            everything += [v for v in values if v == v]
            if name in single_texts:
                single_texts[name].set_y(values[0])
        crossings = []
        for other in names:
            common = min(context_limits[model], context_limits[other])
            if other == model:
                continue
            for a, b in zip(grid, grid[1:]):
                if b > common:
                    break
                before, after = (gib(model, a) - gib(other, a)), (gib(model, b) - gib(other, b))
                if before * after < 0:                       # the sign flips between a and b: bisect to the token
                    while b - a > 1:
                        middle = (a + b) // 2
                        if (gib(model, middle) - gib(other, middle)) * before > 0:
                            a = middle
                        else:
                            b = middle
                    crossings.append((b, other))
        crossings = crossings[:len(crossing_texts)]
        crossing_marks.set_data([t for t, _ in crossings], [gib(model, t) for t, _ in crossings])
        for text, crossing in zip(crossing_texts, crossings + [None] * len(crossing_texts)):
            if crossing is None:
                text.set_text("")
                continue
            tokens, other = crossing
            text.set_position((tokens * 1.08, gib(model, tokens) * 0.85))
            text.set_text(f"crosses {other}\nat {tokens:,} tokens")
        now = [gib(name, num_tokens) for name in names]
        low, high = min(everything + now), max(everything + now)
        curve_ax.set_ylim(low / 2, high * 3)
        chosen_inside = num_tokens <= context_limits[model]
        dot.set_data([num_tokens], [now[names.index(model)] if chosen_inside else float("nan")])
        reach = "" if num_tokens <= context_limits[model] else f" (past its {context_limits[model]:,}-token context)"
        curve_ax.set_title(f"{model}: {now[names.index(model)]:.2f} GiB for {batch_size} × {num_tokens:,} tokens "
                           f"in {dtype}{reach}", fontsize=11)
        readable = [value for name, value in zip(names, now) if num_tokens <= context_limits[name]]
        left = min(readable) if readable else min(now)
        for name, text, value in zip(names, texts, now):
            inside = num_tokens <= context_limits[name]
            point = points[name]
            point.set_xdata([value if inside else float("nan")])     # no dot past the model's context
            point.set_markeredgecolor("black" if name == model else colours[name])
            point.set_markeredgewidth(2.5 if name == model else 1.2)
            point.set_markersize(12 if name == model else 9)
            text.set_x(value * 1.35 if inside else left)
            text.set_text(f"{value:,.2f}" if inside else f"– (reads {context_limits[name]:,} tokens at most)")
            text.set_fontweight("bold" if name == model else "normal")
        dots_ax.set_xlim(left / 2, (max(readable) if readable else max(now)) * 4)   # room for the last number
        dots_ax.set_title(f"Every model at {num_tokens:,} tokens, batch {batch_size}, {dtype}\n"
                          f"(black outline: the chosen model; –: past its context)", fontsize=10)

    return LiveFigure(fig, redraw, {"model": choice("model", names, model),
                                    "num_tokens": steps_slider("context length T", CONTEXT_LENGTHS, num_tokens),
                                    "batch_size": steps_slider("batch B", BATCH_SIZES, batch_size),
                                    "dtype": choice("numbers", list(DTYPES), dtype)})


def recall_figure(num_pairs: list[int], results: dict[str, list[float]], dim: int) -> CourseFigure:
    """Look-ups that find the right value against the number of stored pairs ``N``, one line per method.

    A dashed line marks chance (``1 / N``), a dotted one ``N = dim``, where ``N`` keys stop fitting side by side.
    """
    fig = new_figure(7.5, 3.8)
    ax = fig.axes[0]
    for method, accuracies in results.items():
        ax.plot(num_pairs, accuracies, marker="o", label=method, color=_METHOD_COLOURS.get(method))
    ax.plot(num_pairs, [1 / n for n in num_pairs], linestyle="--", color="gray", label="chance, 1 / N")
    ax.axvline(dim, color="black", linestyle=":", linewidth=1)
    ax.text(dim * 1.05, 0.5, f"N = $d_k$ = {dim}", fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_xticks(num_pairs, labels=[str(n) for n in num_pairs])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("stored key/value pairs $N$")
    ax.set_ylabel("fraction of look-ups right")
    ax.set_title(f"Reading back one of $N$ stored values ($d_k$ = {dim})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="lower left")
    return fig
