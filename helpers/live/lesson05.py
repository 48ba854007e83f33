"""The pictures of notebook 05 (dropout on attention weights): the Monte-Carlo check and the explorer; source lines.

A lesson cell shows the idea and one call, e.g. ``dropout_explorer(attn_weights, tokens)``; the figure's
layout, the colour ranges and what a slider move changes live here. All tensors are read on the CPU.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.collections import LineCollection
from matplotlib.patches import Rectangle
from matplotlib.ticker import FormatStrFormatter

from ..diagrams._draw import PALETTE
from ..dropout import attention_dropout, dropout_row_sums
from ..masks import causal_mask
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, float_slider, int_slider

__all__ = ["mark_dropped", "monte_carlo_figure", "dropout_explorer", "show_source_lines"]

_DROP_COLOR = "#ff4040"  # the red cross on a dropped weight, as in the dropout diagram
_MEAN_DRAWS = 2_000  # draws behind the "mean row sum" dots of the explorer
_KEY = "white, red x: dropped by this draw; grey: future (masked)"


def _spaced(fig: CourseFigure) -> CourseFigure:
    # Room between panels, so a colour bar's label never touches the next panel's axis label.
    fig.get_layout_engine().set(w_pad=0.12, wspace=0.05)
    return fig


def _grey_future(heatmap: Heatmap) -> None:
    """Paint the cells above the diagonal grey (the causal mask hides them), as the dropout diagram does."""
    num_tokens = heatmap.image.get_array().shape[-1]
    for row, col in causal_mask(num_tokens).nonzero().tolist():
        heatmap.ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, facecolor=PALETTE["mask"], edgecolor="none",
                                       zorder=2.1))


def mark_dropped(heatmap: Heatmap, keep: torch.Tensor, crosses: LineCollection | None = None) -> LineCollection:
    """Cross out every weight dropout removed (on or below the diagonal); blank the numbers of hidden cells.

    ``keep``: ``(T, T)`` bool, True where a weight survived. The crosses are one ``LineCollection`` (pass the one
    returned by the previous call to move it); the numbers of dropped and future cells are left out.
    """
    num_tokens = keep.shape[-1]
    future = causal_mask(num_tokens)
    dropped_cells = ~keep.cpu() & ~future  # (T, T): visible to the query, but dropped
    segments = []
    for row, col in dropped_cells.nonzero().tolist():
        heatmap.texts[row][col].set_text("")
        segments += [[(col - 0.3, row - 0.3), (col + 0.3, row + 0.3)], [(col - 0.3, row + 0.3), (col + 0.3, row - 0.3)]]
    for row, col in future.nonzero().tolist():
        heatmap.texts[row][col].set_text("")
    if crosses is None:
        crosses = heatmap.ax.add_collection(LineCollection(segments, colors=_DROP_COLOR, linewidths=1.8, zorder=2.3))
        crosses.set_animated(True)
    else:
        crosses.set_segments(segments)
    return crosses


def monte_carlo_figure(row_sums: torch.Tensor, tokens: Sequence[str], p: float, row: int = 1) -> CourseFigure:
    """Left: the running mean of every row sum over the draws; right: how often each sum of one row came up.

    ``row_sums``: ``(n, T)``, one row sum per draw and query token; ``row``: the query token whose single draws the
    right panel counts (one bar per distinct sum, its height the fraction of the draws that gave it).
    """
    row_sums = row_sums.cpu().double()
    num_draws = row_sums.shape[0]
    running_means = row_sums.cumsum(dim=0) / torch.arange(1, num_draws + 1).unsqueeze(1)  # (N, T)
    fig = _spaced(new_figure(12, 4.4, ncols=2))
    mean_ax, hist_ax = fig.axes
    top = torch.log10(torch.tensor(float(num_draws))).item()
    shown_at = torch.logspace(0, top, 300).long().clamp(max=num_draws).unique()  # even steps on a log axis
    for query, token in enumerate(tokens):
        mean_ax.plot(shown_at, running_means[shown_at - 1, query], label=f"row {query} ('{token}')", linewidth=1.2)
    mean_ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    mean_ax.set_xscale("log")
    mean_ax.set_ylim(0.0, 2.2)
    mean_ax.set_xlabel("number of dropout draws $n$ (log scale)")
    mean_ax.set_ylabel("mean row sum over the first $n$ draws")
    mean_ax.set_title(f"$p$ = {p:g}: every row averages to 1")
    mean_ax.legend(loc="upper right", fontsize=8)
    # One row's single draws: the distinct sums (equal up to rounding) and the fraction of draws that gave each.
    sums, counts = torch.unique(row_sums[:, row].mul(1e6).round().div(1e6), return_counts=True)
    fractions = counts.double() / num_draws
    hist_ax.bar(sums.tolist(), fractions.tolist(), width=0.04, color="tab:orange")
    for value, fraction in zip(sums.tolist(), fractions.tolist()):
        hist_ax.text(value, fraction, f"{value:.2f}", ha="center", va="bottom", fontsize=9)
    hist_ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    hist_ax.set_xlim(-0.15, 2.15 if float(sums.max()) <= 2.0 else float(sums.max()) + 0.15)
    hist_ax.set_ylim(0.0, 1.15 * float(fractions.max()))
    hist_ax.set_xlabel(f"sum of row {row} in one draw (dashed: 1)")
    hist_ax.set_ylabel(f"fraction of the {num_draws:,} draws")
    hits_one = bool(((sums - 1).abs() < 1e-6).any())
    hist_ax.set_title(f"Row {row} ('{tokens[row]}'): {len(sums)} different sums, "
                      + ("1 among them" if hits_one else "none of them 1"))
    return fig


def dropout_explorer(attn_weights: torch.Tensor, tokens: Sequence[str], p: float = 0.5,
                     seed: int = 123) -> LiveFigure:
    """Sliders for ``p`` and the seed of one draw; left the weights after dropout, right each row's sum.

    The black dots are the mean row sums over 2,000 draws at the same ``p``: the same draws at every seed (a
    generator of their own, seed 0), so they match ``dropout_row_sums(attn_weights, p, 2_000,
    torch.Generator().manual_seed(0)).mean(dim=0)``; the row-sum axis is fixed for each ``p`` (up to above the
    largest possible sum, ``1 / (1 - p)``, which its title names). The heatmap's colour
    scale runs from 0 to this draw's largest weight (``1 / (1 - p)`` only if a row's 1.0 survives), so the survivors
    spread over the whole scale; dropped
    weights are white and crossed out, as in the dropout diagram, future cells grey. For tests, the returned LiveFigure carries ``heatmap``, ``bars``, ``mean_dots`` and ``crosses``.
    """
    attn_weights = attn_weights.detach().cpu()
    num_tokens = len(tokens)
    visible = ~causal_mask(num_tokens)  # the weights a token may use
    fig = _spaced(new_figure(12, 4.6, ncols=2))
    drop_ax, sum_ax = fig.axes
    heatmap = Heatmap(drop_ax, attn_weights, tokens, tokens, vmin=0.0, vmax=1.0,
                      colorbar_label="$\\tilde a_{ij}$ (colour scale: 0 to this draw's largest)")
    heatmap.colorbar.formatter = FormatStrFormatter("%.1f")  # ticks of one width at every p: the layout holds
    cmap = heatmap.image.get_cmap().copy()
    cmap.set_bad("white")  # a dropped weight: white, as in the dropout diagram
    heatmap.image.set_cmap(cmap)
    _grey_future(heatmap)
    drop_ax.set_xlabel(f"key token\n{_KEY}")
    crosses = mark_dropped(heatmap, torch.ones(num_tokens, num_tokens, dtype=torch.bool))
    bars = Bars(sum_ax, attn_weights.sum(dim=-1), tokens, xlabel="query token", ylabel="row sum",
                annotate=True, reference=1.0)
    # The means sit just right of their bars, so they never cover a bar's number.
    mean_dots, = sum_ax.plot([i + 0.3 for i in range(num_tokens)], [1.0] * num_tokens, "o", color="black",
                             markersize=5, label=f"mean over {_MEAN_DRAWS:,} draws")
    sum_ax.legend(loc="upper left")

    def redraw(p: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        dropped, keep = attention_dropout(attn_weights, p, generator)                    # (T, T) each
        # The same 2,000 draws at every seed (their own generator, seed 0): the lesson prints their means.
        mean_sums = dropout_row_sums(attn_weights, p, _MEAN_DRAWS, torch.Generator().manual_seed(0)).mean(dim=0)
        top = 1 / (1 - p)
        num_dropped = int((visible & ~keep).sum())
        largest = float(dropped.max())  # this draw's largest survivor; all dropped: the largest possible one
        heatmap.image.set_clim(0.0, largest if largest > 0 else top)  # before the update: numbers' colours fit
        heatmap.update(dropped, title=f"$p$ = {p:.2f}, seed {seed}: {num_dropped} of {int(visible.sum())} "
                                      f"weights dropped, kept weights x {top:.2f}")
        heatmap.image.set_data(np.ma.masked_array(dropped.numpy(), mask=(visible & ~keep).numpy()))
        mark_dropped(heatmap, keep, crosses)
        bars.ylim = (0.0, 1.25 * top)
        # A fixed axis per p, up to above the largest possible sum (every weight kept), whatever the seed.
        bars.update(dropped.sum(dim=-1), title=f"Row sums of this draw (dashed: 1; at most 1/(1-p) = {top:.2f})")
        mean_dots.set_ydata(mean_sums.tolist())

    live = LiveFigure(fig, redraw, {
        "p": float_slider("dropout p", p, 0.0, 0.9, 0.05),
        "seed": int_slider("seed", seed, 0, 500),
    }, animated=[mean_dots])
    live.heatmap, live.bars, live.mean_dots, live.crosses = heatmap, bars, mean_dots, crosses
    return live


def show_source_lines(obj, start: str, end: str) -> None:
    """Print the lines of ``obj``'s source from the first that contains ``start`` to the next that contains ``end``.

    A lesson's excerpt: only the lines it talks about (no signature, docstring or argument checks), under a
    comment that names where they come from.
    """
    lines = textwrap.dedent(inspect.getsource(obj)).splitlines()
    first = next((i for i, line in enumerate(lines) if start in line), None)
    if first is None:
        raise ValueError(f"start={start!r} does not occur in the source of {obj.__qualname__}")
    last = next((i for i in range(first, len(lines)) if end in lines[i]), None)
    if last is None:
        raise ValueError(f"end={end!r} does not occur after start in the source of {obj.__qualname__}")
    print(f"# from {obj.__module__}.{obj.__qualname__}")
    print(textwrap.dedent("\n".join(lines[first:last + 1])))
