"""Explicit, tiled and fused causal attention: time and peak memory as the sequence grows.

Run:  .venv/bin/python benchmarks/efficient_attention.py            (~2-5 minutes on a 2-core CPU)
      .venv/bin/python benchmarks/efficient_attention.py --quick    (T = 128 and 512 only, seconds)
      .venv/bin/python benchmarks/efficient_attention.py --device cuda
      .venv/bin/python benchmarks/efficient_attention.py --device cuda --dtype bfloat16 --lengths 1024 4096 16384

Batch 4, 8 heads, head_dim 64 (d_model 512), float32 (or --dtype), causal, forward pass only under
torch.inference_mode. Two tables per sequence length T:

* attention core, on ready-made (B, H, T, D) queries/keys/values: the explicit teaching
  formula (helpers.attention.scaled_dot_product_attention with a causal mask), the tiled
  online softmax (helpers.efficient.tiled_attention) and bare F.scaled_dot_product_attention;
  ratios are to bare F.scaled_dot_product_attention.
* whole layer, on (B, T, d_model) inputs: helpers MultiHeadAttention (explicit),
  helpers FastMultiHeadAttention (SDPA), a bare hand-written SDPA layer (three Linear
  projections, view/transpose, F.scaled_dot_product_attention, out_proj, no checks) and
  torch.nn.MultiheadAttention(batch_first=True) called with need_weights=False and a
  causal mask; ratios are to the bare SDPA layer.

Time: median of several repeats after a warm-up; the candidates take turns within each
repeat (in an order rotated from repeat to repeat), so a noisy neighbour slows them all
alike. All ratios come from the same run.
Peak memory of one call, above what was allocated before it (so the result counts, the
inputs do not): on CUDA, torch.cuda.max_memory_allocated; on CPU, the largest "Total
Allocated" of PyTorch's CPU allocator among the allocation events that torch.profiler
records with profile_memory=True (every tensor and kernel buffer allocated through
PyTorch; not Python objects or the memory allocator's own overhead).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import scaled_dot_product_attention
from helpers.efficient import FastMultiHeadAttention, tiled_attention
from helpers.masks import causal_mask
from helpers.modules import MultiHeadAttention

BATCH, HEADS, HEAD_DIM = 4, 8, 64
D_MODEL = HEADS * HEAD_DIM
TILE_SIZE = 128


class BareSDPALayer(nn.Module):
    """The least a causal multi-head layer on SDPA can do: no checks, no options."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q = self.W_query(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.W_key(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.W_value(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


def build_layers(context_length: int, device: torch.device, dtype: torch.dtype) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    explicit = MultiHeadAttention(D_MODEL, D_MODEL, context_length, 0.0, HEADS)
    fast = FastMultiHeadAttention(D_MODEL, D_MODEL, context_length, 0.0, HEADS)
    fast.load_state_dict(explicit.state_dict())
    bare = BareSDPALayer(D_MODEL, HEADS)
    bare.load_state_dict({k: v for k, v in explicit.state_dict().items() if k != "mask"})
    torch_mha = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
    with torch.no_grad():  # the same function: same weights, zero biases on the q/k/v projections
        torch_mha.in_proj_weight.copy_(torch.cat([explicit.W_query.weight, explicit.W_key.weight,
                                                  explicit.W_value.weight]))
        torch_mha.in_proj_bias.zero_()
        torch_mha.out_proj.load_state_dict(explicit.out_proj.state_dict())
    layers = {"MultiHeadAttention (explicit)": explicit, "FastMultiHeadAttention": fast,
              "bare SDPA layer": bare, "nn.MultiheadAttention": torch_mha}
    return {name: layer.to(device, dtype).eval() for name, layer in layers.items()}


def layer_call(layer: nn.Module, x: torch.Tensor, mask: torch.Tensor):
    if isinstance(layer, nn.MultiheadAttention):
        return lambda: layer(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)[0]
    return lambda: layer(x)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_ms(calls: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median wall time per call in ms; the calls take turns in each of ``repeats`` rounds."""
    times = {name: [] for name in calls}
    for name, call in calls.items():  # warm-up
        call()
    sync(device)
    names = list(calls)
    for repeat in range(repeats):
        shift = repeat % len(names)  # rotate the order, so no path always runs right after the same one
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            calls[name]()
            sync(device)
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def peak_mib(call, device: torch.device) -> float:
    if device.type == "cuda":
        sync(device)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            result = call()
        sync(device)
        peak = torch.cuda.max_memory_allocated() - before
        del result
    else:
        peak = cpu_peak_bytes(call)
    return peak / 2**20


@contextlib.contextmanager
def stderr_silenced():
    """The profiler's C++ side logs a line to stderr on every start and stop; keep the table readable."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def cpu_peak_bytes(call) -> int:
    """Peak of the CPU allocator's running total during ``call()``, above its level just before."""
    with stderr_silenced(), torch.inference_mode():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            result = call()
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as file:
                events = [e["args"] for e in json.load(file)["traceEvents"] if e.get("name") == "[memory]"]
    del result
    if not events:
        return 0
    before = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - before


def print_table(title: str, ms: dict, mib: dict, reference: str) -> None:
    print(f"  {title}")
    for name in ms:
        print(f"    {name:<32}{ms[name]:10.2f} ms {ms[name] / ms[reference]:7.2f}x {mib[name]:10.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 128 and 512 only, fewer repeats")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="dtype of the inputs and layers (CUDA's flash kernel needs bfloat16 or float16)")
    parser.add_argument("--lengths", type=int, nargs="+", help="sequence lengths T (default 128 ... 2048)")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2  # 16-bit formats keep about 3 significant digits
    torch.set_num_threads(args.threads)
    lengths = args.lengths or ((128, 512) if args.quick else (128, 256, 512, 1024, 2048))
    bytes_per_number = torch.finfo(dtype).bits // 8

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__}, device {name}, {torch.get_num_threads()} CPU threads; "
          f"batch {BATCH}, {HEADS} heads, head_dim {HEAD_DIM}, {args.dtype}, causal, forward only; tile {TILE_SIZE}")
    print("columns: median time per call, ratio to the bare SDPA reference of its table, peak memory")
    layer_ratios = {"bare": [], "torch": []}
    for num_tokens in lengths:
        repeats = 7 if num_tokens <= 512 else 5
        if args.quick:
            repeats = 3
        generator = torch.Generator().manual_seed(num_tokens)
        q, k, v = (torch.randn(BATCH, HEADS, num_tokens, HEAD_DIM, generator=generator).to(device, dtype)
                   for _ in range(3))
        hide = causal_mask(num_tokens, device=device)  # True = hide (helpers and nn.MultiheadAttention)
        core = {
            "explicit softmax(QK^T/sqrt(d))V": lambda: scaled_dot_product_attention(q, k, v, mask=hide)[0],
            f"tiled online softmax ({TILE_SIZE})": lambda: tiled_attention(q, k, v, is_causal=True,
                                                                          tile_size=TILE_SIZE),
            "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        }
        x = torch.randn(BATCH, num_tokens, D_MODEL, generator=generator).to(device, dtype)
        layers = {n: layer_call(layer, x, hide) for n, layer in build_layers(num_tokens, device, dtype).items()}
        with torch.inference_mode():  # every path computes the same function
            reference_core, reference_layer = core["F.scaled_dot_product_attention"](), layers["bare SDPA layer"]()
            for call in core.values():
                torch.testing.assert_close(call(), reference_core, atol=tolerance, rtol=tolerance)
            for call in layers.values():
                torch.testing.assert_close(call(), reference_layer, atol=tolerance, rtol=tolerance)
            del reference_core, reference_layer
            core_ms = median_ms(core, repeats, device)
            layer_ms = median_ms(layers, repeats, device)
        core_mib = {n: peak_mib(call, device) for n, call in core.items()}
        layer_mib = {n: peak_mib(call, device) for n, call in layers.items()}
        print(f"\nT = {num_tokens} ({repeats} repeats; one (B, H, T, T) {args.dtype} tensor = "
              f"{BATCH * HEADS * num_tokens**2 * bytes_per_number / 2**20:.1f} MiB)")
        print_table("attention core (ratio to F.scaled_dot_product_attention)", core_ms, core_mib,
                    "F.scaled_dot_product_attention")
        print_table("whole layer (ratio to the bare SDPA layer)", layer_ms, layer_mib, "bare SDPA layer")
        fast = layer_ms["FastMultiHeadAttention"]
        layer_ratios["bare"].append(fast / layer_ms["bare SDPA layer"])
        layer_ratios["torch"].append(fast / layer_ms["nn.MultiheadAttention"])
    print(f"\nFastMultiHeadAttention / bare SDPA layer: "
          f"{', '.join(f'{r:.3f}' for r in layer_ratios['bare'])} (target <= 1.05)")
    print(f"FastMultiHeadAttention / nn.MultiheadAttention: "
          f"{', '.join(f'{r:.3f}' for r in layer_ratios['torch'])} (target <= 1.00)")


if __name__ == "__main__":
    main()
