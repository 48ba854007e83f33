"""How fast does a slider feel? Python side of one step, and (from the browser tests) keypress to picture.

Run: .venv/bin/python benchmarks/sliders.py [--repeats 40] [--browser-latency build/e2e/latency.json]
                                            [--no-text-cache]   (plain Agg, the path without the glyph cache)
     (or `make benchmark`; `make e2e` / `make test` write build/e2e/latency.json first)

(a) Python side: the time of one slider step (recompute the weights + update the builders + render the
    PNG), median and p95, for the course's largest live figures, rebuilt here with the same shapes:
      * "head grid": notebook 06's view, a 2x2 grid of 10x10 head heatmaps beside one annotated 10x10
        heatmap (100 values written in its cells) with colour bars;
      * "heatmap + bars": notebooks 02/04's view, an annotated 6x6 heatmap beside annotated bars.
    Each next to the naive way, measured in the same run: `ipywidgets.interactive` (what `interact`
    builds) calling a function that makes a new pyplot figure and renders it the way the inline backend
    does (`plt.subplots`, `savefig(bbox_inches="tight")`, `plt.close`).
(b) Transport: the same slider steps with the message the kernel sends built as ipykernel builds it (the
    widget's state as JSON, the PNG as a binary buffer or as base64 text in that JSON), for both ways a
    LiveFigure can deliver its picture (helpers/widgets.py: "image", the default, and "text", for front ends
    without binary comm buffers), measured in the same run, interleaved: medians, the ratio text / image, and
    the bytes per message.
(c) Browser: keypress -> new picture loaded in Chromium, from latency.json written by the browser tests
    (tests/e2e/test_notebooks_in_lab.py: one arrow key on each slider of every notebook with the image
    transport, and of one notebook with the text transport), per transport.
Targets: (a) median <= 30 ms, (c) median <= 150 ms. Timings on a shared machine are noisy: re-run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import comm  # noqa: E402
import matplotlib  # noqa: E402
from jupyter_client.session import json_packer  # noqa: E402

matplotlib.use("agg")
import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from helpers.plotting import Bars, CourseFigure, Heatmap, new_figure  # noqa: E402
from helpers._text_cache import text_cache_status, use_text_cache  # noqa: E402
from helpers.widgets import LiveFigure, float_slider  # noqa: E402

TARGET_PYTHON_MS, TARGET_BROWSER_MS = 30.0, 150.0


class _WireComm(comm.DummyComm):
    """A comm that builds each message as ipykernel would (JSON text + binary buffers) and counts its bytes.

    Without a kernel, ipywidgets sends through a DummyComm that drops messages unbuilt: this one makes the
    transport's cost part of what is timed."""

    sent_bytes: list[int] = []

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        text = json_packer({"comm_id": self.comm_id, "data": data or {}, "metadata": metadata or {}})
        _WireComm.sent_bytes.append(len(text) + sum(memoryview(b).nbytes for b in (buffers or [])))


comm.create_comm = _WireComm  # ipywidgets looks it up on every new widget


def _weights(num_heads: int, num_tokens: int, temperature: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(123)
    scores = torch.randn(num_heads, num_tokens, num_tokens, generator=generator)  # (H, T, T)
    return (scores / temperature).softmax(dim=-1)


def head_grid_live(labels, transport=None):
    fig = CourseFigure(figsize=(12, 5.6), layout="constrained")
    axes = fig.subplot_mosaic([["h0", "h1", "big"], ["h2", "h3", "big"]], width_ratios=[1, 1, 1.7])
    start = _weights(4, len(labels), 1.0)
    small = [Heatmap(axes[f"h{h}"], start[h], labels, labels, vmin=0.0, vmax=1.0, annotate=False,
                     title=f"head {h}", xlabel="", ylabel="", colorbar_label="weight") for h in range(4)]
    big = Heatmap(axes["big"], start[0], labels, labels, vmin=0.0, vmax=1.0, colorbar_label="attention weight")

    def redraw(temperature):
        weights = _weights(4, len(labels), temperature)  # (4, T, T)
        for h, heatmap in enumerate(small):
            heatmap.update(weights[h])
            heatmap.outline_row(3)
        big.update(weights[0], title=f"head 0 at T = {temperature:.1f}")
        big.outline_row(3)

    return LiveFigure(fig, redraw, {"temperature": float_slider("T", 1.0, 0.1, 5.0, 0.1)}, transport=transport)


def head_grid_naive(labels, temperature):
    weights = _weights(4, len(labels), temperature)
    fig = plt.figure(figsize=(12, 5.6), layout="constrained")
    axes = fig.subplot_mosaic([["h0", "h1", "big"], ["h2", "h3", "big"]], width_ratios=[1, 1, 1.7])
    for h in range(4):
        Heatmap(axes[f"h{h}"], weights[h], labels, labels, vmin=0.0, vmax=1.0, annotate=False,
                title=f"head {h}", xlabel="", ylabel="", colorbar_label="weight").outline_row(3)
    Heatmap(axes["big"], weights[0], labels, labels, vmin=0.0, vmax=1.0, colorbar_label="attention weight",
            title=f"head 0 at T = {temperature:.1f}").outline_row(3)
    return fig


def pair_live(labels, transport=None):
    fig = new_figure(10, 4.2, ncols=2)
    start = _weights(1, len(labels), 1.0)[0]
    bars = Bars(fig.axes[0], start[0], labels, ylim=(0, 1.1), annotate=True, reference=1 / len(labels))
    heatmap = Heatmap(fig.axes[1], start, labels, labels, vmin=0.0, vmax=1.0, colorbar_label="attention weight")

    def redraw(temperature):
        weights = _weights(1, len(labels), temperature)[0]  # (T, T)
        bars.update(weights[0], highlight=0, title=f"query 0 at T = {temperature:.1f}")
        heatmap.update(weights, title=f"all queries at T = {temperature:.1f}")

    return LiveFigure(fig, redraw, {"temperature": float_slider("T", 1.0, 0.1, 5.0, 0.1)}, transport=transport)


def pair_naive(labels, temperature):
    weights = _weights(1, len(labels), temperature)[0]
    fig, (bar_ax, heat_ax) = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    Bars(bar_ax, weights[0], labels, ylim=(0, 1.1), annotate=True, reference=1 / len(labels), highlight_color="r",
         title=f"query 0 at T = {temperature:.1f}").update(weights[0], highlight=0)
    Heatmap(heat_ax, weights, labels, labels, vmin=0.0, vmax=1.0, colorbar_label="attention weight",
            title=f"all queries at T = {temperature:.1f}")
    return fig


def _naive_interact(build, labels):
    """What `interact` does with a pyplot function, rendered like the inline backend (no display here)."""
    def show(temperature):
        fig = build(labels, temperature)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")  # the inline backend's way
        plt.close(fig)

    return widgets.interactive(show, temperature=float_slider("T", 1.0, 0.1, 5.0, 0.1))


def _time_steps(slider, repeats: int) -> list[float]:
    values = [round(0.1 + 0.1 * (i % 49), 1) for i in range(1, repeats + 2)]
    slider.value = values[0]  # warm-up
    times = []
    for value in values[1:]:
        if value == slider.value:
            continue
        start = time.perf_counter()
        slider.value = value
        times.append((time.perf_counter() - start) * 1000)
    return times


def _stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--browser-latency", default="build/e2e/latency.json")
    parser.add_argument("--no-text-cache", action="store_true",
                        help="draw text with plain Agg, as on a matplotlib the glyph cache does not support")
    args = parser.parse_args()
    if args.no_text_cache:
        use_text_cache(False)
    print(f"glyph cache: {text_cache_status()[1]}; matplotlib {matplotlib.__version__}")
    print(f"(a) Python side of one slider step, {args.repeats} steps each, torch threads {torch.get_num_threads()}")
    sentence = "the cat sat on the mat because it was tired".split()
    cases = [("head grid: 2x2 heads + annotated 10x10", head_grid_live, head_grid_naive,
              [f"{i}:{w}" for i, w in enumerate(sentence)]),
             ("heatmap + bars: annotated 6x6", pair_live, pair_naive,
              ["Your", "journey", "starts", "with", "one", "step"])]
    worst = 0.0
    for name, live_builder, naive_builder, labels in cases:
        live = live_builder(labels)
        fast = _time_steps(live.controls["temperature"], args.repeats)
        renders = (live.renderer.fast_renders, live.renderer.full_renders)
        with contextlib.redirect_stdout(io.StringIO()):  # interactive's clear_output writes terminal codes here
            naive = _naive_interact(naive_builder, labels)
            slow = _time_steps(naive.children[0], max(10, args.repeats // 4))
        (fast_median, fast_p95), (slow_median, slow_p95) = _stats(fast), _stats(slow)
        worst = max(worst, fast_median)
        print(f"  {name}")
        print(f"    LiveFigure (in place, blitted)       median {fast_median:6.1f} ms   p95 {fast_p95:6.1f} ms"
              f"   ({renders[0]} fast / {renders[1]} full renders)")
        print(f"    naive interact + new pyplot figure    median {slow_median:6.1f} ms   p95 {slow_p95:6.1f} ms"
              f"   ({slow_median / fast_median:.1f}x slower); pyplot figures open after: {len(plt.get_fignums())}")
    print(f"  target: median <= {TARGET_PYTHON_MS:.0f} ms -> {'met' if worst <= TARGET_PYTHON_MS else 'NOT met'} "
          f"(largest median {worst:.1f} ms)")

    print(f"(b) transport of one slider step, message built as the kernel sends it, {args.repeats} steps each, "
          "interleaved")
    for name, live_builder, _, labels in cases:
        _transport_comparison(name, live_builder, labels, args.repeats)

    path = Path(args.browser_latency)
    print(f"(c) Chromium, slider keypress -> new picture loaded ({path})")
    if not path.exists():
        print("    no measurements yet: run `make e2e` (or `make test`) first, then this again")
        return
    data = json.loads(path.read_text())
    summary = data["summary"]
    print(f"    median {summary['median_ms']:.0f} ms   p95 {summary['p95_ms']:.0f} ms   max {summary['max_ms']:.0f} ms   "
          f"over {summary['count']} slider steps in {len({r['notebook'] for r in data['records']})} notebooks")
    for transport in ("image", "text"):
        records = [r for r in data["records"] if r.get("transport", "image") == transport]
        if records:
            shown = sorted(r["picture_ms"] for r in records)
            notebooks = sorted({r["notebook"] for r in records})
            same = [r["picture_ms"] for r in data["records"]
                    if r["notebook"] in notebooks and r.get("transport", "image") != transport]
            other = f"; the other transport on the same notebook(s): median {statistics.median(same):.0f} ms" \
                if same else ""
            print(f"    transport {transport}: median {statistics.median(shown):.0f} ms over {len(shown)} steps "
                  f"({', '.join(notebooks) if len(notebooks) <= 2 else f'{len(notebooks)} notebooks'}){other}")
    for record in data["records"]:
        print(f"      {record['notebook']:<40} {record['control'][:28]:<28} {record['picture_ms']:6.0f} ms")
    print(f"  target: median <= {TARGET_BROWSER_MS:.0f} ms -> "
          f"{'met' if summary['median_ms'] <= TARGET_BROWSER_MS else 'NOT met'}")


def _transport_comparison(name: str, builder, labels, repeats: int) -> None:
    """Both transports on the same figure, steps interleaved so that both see the same machine load."""
    lives = {transport: builder(labels, transport=transport) for transport in ("image", "text")}
    values = [round(0.1 + 0.1 * (i % 49), 1) for i in range(1, repeats + 2)]
    times = {transport: [] for transport in lives}
    sizes = {transport: [] for transport in lives}
    for value in values:
        for transport, live in lives.items():
            slider = live.controls["temperature"]
            if value == slider.value:
                continue
            _WireComm.sent_bytes.clear()
            start = time.perf_counter()
            slider.value = value
            times[transport].append((time.perf_counter() - start) * 1000)
            sizes[transport].append(sum(_WireComm.sent_bytes))
    (image_median, image_p95), (text_median, text_p95) = _stats(times["image"]), _stats(times["text"])
    print(f"  {name}")
    for transport, (median, p95) in (("image", (image_median, image_p95)), ("text", (text_median, text_p95))):
        print(f"    transport {transport:<5}  median {median:6.1f} ms   p95 {p95:6.1f} ms   "
              f"{statistics.median(sizes[transport]) / 1024:6.1f} KiB per step")
    print(f"    ratio text / image: {text_median / image_median:.2f} (time), "
          f"{statistics.median(sizes['text']) / statistics.median(sizes['image']):.2f} (bytes)")


if __name__ == "__main__":
    main()
