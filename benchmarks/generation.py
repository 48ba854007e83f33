"""Generation with and without a KV cache: time per generated token as the sequence grows.

Run:  .venv/bin/python benchmarks/generation.py                 (~1-2 minutes on a quiet 2-core CPU)
      .venv/bin/python benchmarks/generation.py --quick         (T = 64 and 256 only, seconds)
      .venv/bin/python benchmarks/generation.py --device cuda

The model is notebook 11's TinyCausalLM (one causal attention layer between embeddings and a read-out), untrained,
with d_model 256, 8 heads, float32, under torch.inference_mode. Two measurements per length T:

* one step: the time to produce the logits of token T when T - 1 tokens came before, without a cache (a pass
  over all T - 1 tokens) and with one (a pass over the newest token; the cache, filled beforehand, holds the rest);
* whole generation (T up to 512): greedy generation of T - 8 tokens from an 8-token prompt, with
  helpers.generation.generate, without and with the cache (the cached run includes its prefill).

Times are medians of several repeats; the two candidates take turns within each repeat, so a noisy neighbour
slows both alike. Ratios are "no cache / cache" from the same run: the no-cache run is the reference.
Also with grouped-query attention (2 key/value heads): the step time and the cache's size.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from helpers.generation import TinyCausalLM, generate, kv_cache_bytes

D_MODEL, HEADS, VOCAB, PROMPT = 256, 8, 50, 8


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def _step_times(model: TinyCausalLM, length: int, repeats: int, device: torch.device) -> tuple[float, float]:
    ids = torch.randint(0, VOCAB, (1, length - 1), generator=torch.Generator().manual_seed(0)).to(device)
    without, with_cache = [], []
    for repeat in range(repeats + 1):   # the first round warms up
        cache = model.new_cache()
        model(ids[:, :-1], cache=cache)
        order = [("plain", lambda: model(ids)), ("cached", lambda: model(ids[:, -1:], cache=cache))]
        if repeat % 2:
            order.reverse()
        for name, fn in order:
            seconds = _timed(fn, device)
            if repeat:
                (without if name == "plain" else with_cache).append(seconds)
    return statistics.median(without), statistics.median(with_cache)


def _generation_times(model: TinyCausalLM, length: int, repeats: int, device: torch.device) -> tuple[float, float]:
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)
    without, with_cache = [], []
    for repeat in range(repeats):
        for use_cache in ((False, True) if repeat % 2 == 0 else (True, False)):
            seconds = _timed(lambda: generate(model, prompt, length - PROMPT, use_cache=use_cache), device)
            (with_cache if use_cache else without).append(seconds)
    return statistics.median(without), statistics.median(with_cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="T = 64 and 256 only, fewer repeats")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    device = torch.device(args.device)
    lengths = (64, 256) if args.quick else (64, 128, 256, 512, 1024)
    repeats = 3 if args.quick else 7
    torch.manual_seed(0)
    model = TinyCausalLM(VOCAB, max(lengths), d_model=D_MODEL, num_heads=HEADS).to(device).eval()
    torch.manual_seed(0)
    grouped = TinyCausalLM(VOCAB, max(lengths), d_model=D_MODEL, num_heads=HEADS, num_kv_heads=2).to(device).eval()
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, d_model {D_MODEL}, "
          f"{HEADS} heads, float32")
    print("\none generation step (logits of token T):")
    print(f"{'T':>6} {'no cache ms':>12} {'cache ms':>9} {'ratio':>6} {'GQA (H_kv=2) cache ms':>22}")
    with torch.inference_mode():
        for length in lengths:
            without, with_cache = _step_times(model, length, repeats, device)
            _, grouped_step = _step_times(grouped, length, repeats, device)
            print(f"{length:6d} {without * 1e3:12.3f} {with_cache * 1e3:9.3f} {without / with_cache:5.1f}x "
                  f"{grouped_step * 1e3:22.3f}")
        print(f"\nwhole generation from a {PROMPT}-token prompt:")
        print(f"{'T':>6} {'no cache s':>11} {'cache s':>8} {'ratio':>6}")
        for length in [n for n in lengths if n <= 512]:
            without, with_cache = _generation_times(model, length, max(1, repeats // 3), device)
            print(f"{length:6d} {without:11.3f} {with_cache:8.3f} {without / with_cache:5.1f}x")
    head_dim = D_MODEL // HEADS
    print(f"\ncache of one layer at T = {max(lengths)} (float32): "
          f"{kv_cache_bytes(1, HEADS, head_dim, max(lengths), 4) / 2**20:.2f} MiB with {HEADS} key/value heads, "
          f"{kv_cache_bytes(1, 2, head_dim, max(lengths), 4) / 2**20:.2f} MiB with 2")


if __name__ == "__main__":
    main()
