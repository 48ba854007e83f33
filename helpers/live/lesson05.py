"""The pictures of notebook 05 (dropout on attention weights): one dropout draw, the Monte-Carlo check, the explorer.

A lesson cell shows the idea and one call, e.g. ``dropout_explorer(attn_weights, tokens)``; the figure's
layout, the colour ranges and what a slider move changes live here. All tensors are read on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dropout import attention_dropout, dropout_row_sums
from ..masks import causal_mask
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, float_slider, int_slider

__all__ = ["mark_dropped", "dropout_draw_figure", "monte_carlo_figure", "dropout_explorer"]

_DROP_COLOR = "#ff7070"
_MEAN_DRAWS = 2_000  # draws behind the "mean row sum" dots of the explorer


def _spaced(fig: CourseFigure) -> CourseFigure:
    # Room between panels, so a colour bar's label never touches the next panel's axis label.
    fig.get_layout_engine().set(w_pad=0.12, wspace=0.05)
    return fig


def mark_dropped(heatmap: Heatmap, keep: torch.Tensor) -> None:
    """Write "drop" in every cell a token may use (on or below the diagonal) whose weight dropout removed."""
    num_tokens = keep.shape[-1]
    dropped_cells = ~keep.cpu() & ~causal_mask(num_tokens)  # (T, T): visible to the query, but dropped
    for row, col in dropped_cells.nonzero().tolist():
        heatmap.texts[row][col].set_text("drop")
        heatmap.texts[row][col].set_color(_DROP_COLOR)


def dropout_draw_figure(attn_weights: torch.Tensor, dropped: torch.Tensor, keep: torch.Tensor,
                        tokens: Sequence[str], p: float) -> CourseFigure:
    """Three panels: the weights A, one draw of dropout on them (dropped cells marked), each row's sum.

    ``attn_weights``, ``dropped``, ``keep``: ``(T, T)``. The middle colour scale runs from 0 to ``1/(1-p)``,
    the most a weight can become, so a survivor keeps the colour position it had relative to that range.
    """
    attn_weights, dropped, keep = attn_weights.cpu(), dropped.cpu(), keep.cpu()
    fig = _spaced(new_figure(12, 4.2, ncols=3))
    before_ax, after_ax, sums_ax = fig.axes
    Heatmap(before_ax, attn_weights, tokens, tokens, vmin=0.0, vmax=1.0, title="$A$: causal weights, no dropout",
            colorbar_label="$a_{ij}$")
    after = Heatmap(after_ax, dropped, tokens, tokens, vmin=0.0, vmax=1 / (1 - p),
                    title=f"After dropout, $p$ = {p:g} (survivors x {1 / (1 - p):g})",
                    colorbar_label="$a_{ij}$ after dropout")
    mark_dropped(after, keep)
    Bars(sums_ax, dropped.sum(dim=-1), tokens, xlabel="query token", ylabel="row sum",
         ylim=(0.0, 1.2 / (1 - p)), annotate=True, reference=1.0, title="Row sums (dashed line: 1)")
    return fig


def monte_carlo_figure(row_sums: torch.Tensor, predicted_std: torch.Tensor, tokens: Sequence[str],
                       p: float) -> CourseFigure:
    """Left: the running mean of every row sum over the draws; right: the spread of one draw's row sum.

    ``row_sums``: ``(N, T)``, one row sum per draw and query token; ``predicted_std``: ``(T,)``.
    """
    row_sums = row_sums.cpu().double()
    num_draws = row_sums.shape[0]
    running_means = row_sums.cumsum(dim=0) / torch.arange(1, num_draws + 1).unsqueeze(1)  # (N, T)
    fig = _spaced(new_figure(12, 4.4, ncols=2))
    mean_ax, std_ax = fig.axes
    top = torch.log10(torch.tensor(float(num_draws))).item()
    shown_at = torch.logspace(0, top, 300).long().clamp(max=num_draws).unique()  # even steps on a log axis
    for row, token in enumerate(tokens):
        mean_ax.plot(shown_at, running_means[shown_at - 1, row], label=f"row {row} ('{token}')", linewidth=1.2)
    mean_ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    mean_ax.set_xscale("log")
    mean_ax.set_ylim(0.0, 2.2)
    mean_ax.set_xlabel("number of dropout draws n (log scale)")
    mean_ax.set_ylabel("mean row sum over the first n draws")
    mean_ax.set_title(f"$p$ = {p:g}: every row averages to 1")
    mean_ax.legend(loc="upper right", fontsize=8)
    Bars(std_ax, row_sums.std(dim=0), tokens, xlabel="query token", ylabel="standard deviation of the row sum",
         ylim=(0.0, 1.2), title=f"Spread of one draw's row sum ({num_draws:,} draws)")
    std_ax.plot(range(len(tokens)), predicted_std.cpu().tolist(), "o", color="black", label="predicted")
    std_ax.legend(loc="upper right")
    return fig


def dropout_explorer(attn_weights: torch.Tensor, tokens: Sequence[str], p: float = 0.5,
                     seed: int = 123) -> LiveFigure:
    """Sliders for ``p`` and the seed of one draw; left the weights after dropout, right each row's sum.

    The black dots are the mean row sums over 2,000 further draws at the same ``p``. The heatmap's colour
    range follows ``1/(1-p)``, the largest value a weight can reach. For tests, the returned LiveFigure
    carries ``heatmap``, ``bars`` and ``mean_dots``.
    """
    attn_weights = attn_weights.detach().cpu()
    num_tokens = len(tokens)
    visible = ~causal_mask(num_tokens)  # the weights a token may use
    fig = _spaced(new_figure(12, 4.6, ncols=2))
    drop_ax, sum_ax = fig.axes
    heatmap = Heatmap(drop_ax, attn_weights, tokens, tokens, vmin=0.0, vmax=1 / (1 - p),
                      colorbar_label="$a_{ij}$ after dropout (0 to $1/(1-p)$)")
    bars = Bars(sum_ax, attn_weights.sum(dim=-1), tokens, xlabel="query token", ylabel="row sum",
                annotate=True, reference=1.0)
    # The means sit just right of their bars, so they never cover a bar's number.
    mean_dots, = sum_ax.plot([i + 0.3 for i in range(num_tokens)], [1.0] * num_tokens, "o", color="black",
                             markersize=5, label=f"mean over {_MEAN_DRAWS:,} draws")
    sum_ax.legend(loc="upper left")

    def redraw(p: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        dropped, keep = attention_dropout(attn_weights, p, generator)                    # (T, T) each
        mean_sums = dropout_row_sums(attn_weights, p, _MEAN_DRAWS, generator).mean(dim=0)  # (T,)
        top = 1 / (1 - p)
        heatmap.image.set_clim(0.0, top)
        num_dropped = int((visible & ~keep).sum())
        heatmap.update(dropped, title=f"$p$ = {p:.2f}, seed {seed}: {num_dropped} of {int(visible.sum())} "
                                      f"weights dropped, survivors x {top:.2f}")
        mark_dropped(heatmap, keep)
        bars.ylim = (0.0, 1.25 * top)
        bars.update(dropped.sum(dim=-1), title="Row sums of this draw (dashed: 1)")
        mean_dots.set_ydata(mean_sums.tolist())

    live = LiveFigure(fig, redraw, {
        "p": float_slider("dropout p", p, 0.0, 0.9, 0.05),
        "seed": int_slider("seed", seed, 0, 500),
    })
    live.heatmap, live.bars, live.mean_dots = heatmap, bars, mean_dots
    return live
