"""How long one slider step takes to redraw a LiveFigure, against two slower ways of doing it.

Run: .venv/bin/python benchmarks/redraw.py
Prints the median milliseconds per update of a 6x6 annotated heatmap with a colour bar, and
ratios against the reference (a new figure built and rendered on every step), all measured
in this run on this machine.
"""

from __future__ import annotations

import statistics
import time

import torch

import helpers
from helpers.plotting import Heatmap, figure_to_png, new_figure, plot_heatmap
from helpers.widgets import LiveFigure, float_slider

REPEATS = 30


def median_ms(step) -> float:
    step(1.0)  # warm-up
    times = []
    for i in range(REPEATS):
        start = time.perf_counter()
        step(1.0 + (i % 10) / 10)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    tokens, inputs = helpers.your_journey()
    scores = helpers.dot_product_scores(inputs, inputs)

    def rebuild(factor: float) -> None:  # reference: a fresh figure every step
        figure_to_png(plot_heatmap(scores * factor, tokens, tokens, title=f"x{factor:.1f}"))

    kept = new_figure()
    kept_map = Heatmap(kept.axes[0], scores, tokens, tokens)

    def update_with_layout(factor: float) -> None:  # same figure, layout engine run every step
        kept_map.update(scores * factor, title=f"x{factor:.1f}")
        figure_to_png(kept)

    live_fig = new_figure()
    live_map = Heatmap(live_fig.axes[0], scores, tokens, tokens)
    live = LiveFigure(live_fig, lambda factor: live_map.update(scores * factor, title=f"x{factor:.1f}"),
                      {"factor": float_slider("factor", 1.0, 0.0, 3.0, 0.1)})

    def live_step(factor: float) -> None:  # what a slider step costs in the course
        live.controls["factor"].value = factor

    reference = median_ms(rebuild)
    print(f"torch threads {torch.get_num_threads()}, {REPEATS} updates each, median ms per update")
    for name, step in (("new figure every step (reference)", rebuild),
                       ("Heatmap.update, layout every step", update_with_layout),
                       ("LiveFigure step (layout kept)", live_step)):
        ms = reference if step is rebuild else median_ms(step)
        print(f"  {name:<36} {ms:7.1f} ms   {reference / ms:4.2f}x faster than the reference")


if __name__ == "__main__":
    main()
