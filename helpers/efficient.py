"""Attention without the (T, T) weights tensor: tiles, the online softmax, and a fast layer.

* :func:`tiled_attention` computes ``softmax(Q K^T / sqrt(d_k)) V`` one tile of the
  score matrix at a time, keeping only a running maximum and a running sum per
  query row (the "online softmax" behind flash attention). :func:`iter_tile_steps`
  yields its state after every tile, for pictures.
* :class:`FastMultiHeadAttention` is :class:`helpers.modules.MultiHeadAttention`
  with ``torch.nn.functional.scaled_dot_product_attention`` inside: same
  constructor, same parameters, same outputs.
* :func:`peak_tensor_bytes` and :func:`aten_ops_called` measure what a
  call allocates and which attention kernel PyTorch picked; :func:`ops_inside`
  lists what one C++ operator calls inside itself.

Shapes use ``B`` (batch), ``H`` (heads), ``T`` (tokens) and ``D`` (features).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import weakref
from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._checks import check_float_tensor, check_positive_int
from .modules import MultiHeadAttention, _check_input

__all__ = [
    "TileStep",
    "iter_tile_steps",
    "tiled_attention",
    "FastMultiHeadAttention",
    "peak_tensor_bytes",
    "aten_ops_called",
    "ops_inside",
    "OpRecorder",
    "FUSED_SDPA_KERNELS",
    "builds_the_weights",
]


class TileStep(NamedTuple):
    """The online-softmax state of some query rows after one tile of scores was folded in.

    ``running_max``: ``(..., len(query_rows))``, the largest scaled score seen so far in each row;
    ``running_sum``: ``(..., len(query_rows))``, ``sum_j exp(score_j - running_max)`` over the keys seen so far;
    ``accumulator``: ``(..., len(query_rows), d_v)``, ``sum_j exp(score_j - running_max) v_j`` so far.
    ``done`` is ``True`` on the last tile of these rows: then ``accumulator / running_sum``
    is their context vectors.
    """

    query_rows: range
    key_cols: range
    running_max: torch.Tensor
    running_sum: torch.Tensor
    accumulator: torch.Tensor
    done: bool


def _check_qkv(queries, keys, values, is_causal, tile_size) -> None:
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        check_float_tensor(name, tensor)
        if tensor.dim() < 2 or tensor.shape[-2] == 0:
            raise ValueError(f"{name} must have shape (..., num_tokens, features) with at least one token, "
                             f"got {tuple(tensor.shape)}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries and keys must have the same last dimension (d_k), got "
                         f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)}")
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(f"keys and values must have the same number of tokens, got "
                         f"keys {tuple(keys.shape)} and values {tuple(values.shape)}")
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__}")
    check_positive_int("tile_size", tile_size)


def iter_tile_steps(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
                    is_causal: bool = False, tile_size: int = 64) -> Iterator[TileStep]:
    """Walk the score matrix tile by tile, as flash attention does, yielding the state after each tile.

    Args:
        queries: ``(..., T_q, d_k)``; keys: ``(..., T_k, d_k)``; values: ``(..., T_k, d_v)``.
        is_causal: query ``i`` sees keys ``0..i`` only (PyTorch's convention); tiles wholly
            above the diagonal are skipped, never computed.
        tile_size: rows and columns per tile.

    Query rows are taken ``tile_size`` at a time; for each block of rows the key tiles are
    visited left to right. No ``(T_q, T_k)`` tensor is ever built: the largest score tensor
    is one tile, ``(..., tile_size, tile_size)``.
    """
    _check_qkv(queries, keys, values, is_causal, tile_size)
    num_queries, num_keys = queries.shape[-2], keys.shape[-2]
    scale = 1.0 / math.sqrt(keys.shape[-1])
    for q_start in range(0, num_queries, tile_size):
        q_stop = min(q_start + tile_size, num_queries)
        q_tile = queries[..., q_start:q_stop, :] * scale  # (..., tile, D): the 1/sqrt(d_k) is applied here, once
        row_ids = torch.arange(q_start, q_stop, device=queries.device)
        k_end = min(q_stop, num_keys) if is_causal else num_keys  # later keys are all in the future
        lead = q_tile.shape[:-1]
        running_max = q_tile.new_full(lead, float("-inf"))  # (..., tile)
        running_sum = q_tile.new_zeros(lead)  # (..., tile)
        accumulator = q_tile.new_zeros(*lead, values.shape[-1])  # (..., tile, d_v)
        for k_start in range(0, k_end, tile_size):
            k_stop = min(k_start + tile_size, k_end)
            # (..., tile, D) @ (..., D, tile) -> (..., tile, tile): the one live tile of (scaled) scores
            scores = q_tile @ keys[..., k_start:k_stop, :].transpose(-2, -1)
            if is_causal and k_stop - 1 > q_start:  # the tile crosses the diagonal
                col_ids = torch.arange(k_start, k_stop, device=queries.device)
                scores = scores.masked_fill(col_ids > row_ids[:, None], float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(dim=-1))  # (..., tile)
            # Old terms were exp(s - old_max); multiplying by exp(old_max - new_max) rebases them.
            correction = torch.exp(running_max - new_max)  # (..., tile), 0 on the first tile
            exp_scores = torch.exp(scores - new_max.unsqueeze(-1))  # (..., tile, tile), unnormalised
            running_sum = running_sum * correction + exp_scores.sum(dim=-1)
            # (..., tile, tile) @ (..., tile, d_v) -> (..., tile, d_v)
            accumulator = accumulator * correction.unsqueeze(-1) + exp_scores @ values[..., k_start:k_stop, :]
            running_max = new_max
            yield TileStep(range(q_start, q_stop), range(k_start, k_stop), running_max, running_sum,
                           accumulator, k_stop == k_end)


def tiled_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
                    is_causal: bool = False, tile_size: int = 64) -> torch.Tensor:
    """``softmax(Q K^T / sqrt(d_k)) V`` computed tile by tile with the online softmax.

    Shapes: queries ``(..., T_q, d_k)``, keys ``(..., T_k, d_k)``, values ``(..., T_k, d_v)``;
    returns the context vectors ``(..., T_q, d_v)`` (no weights: they are never stored).
    Equals :func:`helpers.attention.scaled_dot_product_attention` up to float rounding;
    differentiable. See :func:`iter_tile_steps` for the arguments.
    """
    blocks = []
    for step in iter_tile_steps(queries, keys, values, is_causal=is_causal, tile_size=tile_size):
        if step.done:  # (..., tile, d_v) / (..., tile, 1)
            blocks.append(step.accumulator / step.running_sum.unsqueeze(-1))
    return torch.cat(blocks, dim=-2)  # blocks of rows -> (..., T_q, d_v)


class FastMultiHeadAttention(MultiHeadAttention):
    """:class:`~helpers.modules.MultiHeadAttention` that runs PyTorch's fused attention kernel.

    Same constructor, same parameters created in the same order (so a seeded
    model has the same numbers and ``state_dict`` loads both ways), same output.
    ``forward`` calls ``F.scaled_dot_product_attention(..., is_causal=True)``, which
    never builds the ``(B, H, T, T)`` weights on the fused kernels.
    With ``return_weights=True`` there is no fused kernel that returns the weights,
    so it falls back to the explicit path of ``MultiHeadAttention``.
    Dropout (in ``train()`` mode) draws a different random pattern from the explicit path.

    Input ``x``: ``(B, T, d_in)`` with ``T <= context_length``; output ``(B, T, d_out)``.
    """

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        if return_weights:
            return super().forward(x, return_weights=True)
        _check_input(x, self.d_in, self.context_length, batched_only=True)
        batch_size, num_tokens, _ = x.shape
        queries = self._split_heads(self.W_query(x))  # (B, T, d_in) -> (B, H, T, D)
        keys = self._split_heads(self.W_key(x))
        values = self._split_heads(self.W_value(x))
        context_vecs = F.scaled_dot_product_attention(
            queries, keys, values, dropout_p=self.dropout.p if self.training else 0.0, is_causal=True
        )  # (B, H, T, D)
        context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_tokens, self.d_out)  # -> (B, T, d_out)
        return self.out_proj(context_vecs)


def _refuse_inference_mode(name: str) -> None:
    if torch.is_inference_mode_enabled():
        raise RuntimeError(f"{name} must be called outside torch.inference_mode() (use torch.no_grad()): "
                           "inside it PyTorch runs composite operators as one opaque call")


class _AllocationCounter(TorchDispatchMode):
    """Adds up the bytes of every new storage an aten op returns, and takes them off when freed."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.counted: set[int] = set()

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.counted.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in inputs or key in self.counted:  # a view or an in-place result
                continue
            self.counted.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key, nbytes)
        return out


def peak_tensor_bytes(fn, *args, **kwargs) -> tuple[object, int]:
    """Run ``fn(*args, **kwargs)`` and return ``(result, peak_bytes)``.

    ``peak_bytes`` is the largest total size of the tensors that PyTorch operators
    created during the call and that were alive at the same time (inputs and views
    do not count; the result does while it exists). Scratch buffers a fused kernel
    allocates internally are invisible to it. Works on any device; deterministic.
    Call it outside ``torch.inference_mode`` (inside it, the dispatcher hides the
    intermediate tensors of a composite operator such as SDPA); use ``torch.no_grad()`` to leave
    out what autograd would save for the backward pass.
    """
    _refuse_inference_mode("peak_tensor_bytes")
    counter = _AllocationCounter()
    with counter:
        result = fn(*args, **kwargs)
    return result, counter.peak


class OpRecorder(TorchDispatchMode):
    """Notes the name of every aten operator that runs while it is active (``with OpRecorder() as r: ...``)."""

    def __init__(self):
        super().__init__()
        self.names: dict[str, None] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names[str(func.overloadpacket)] = None  # e.g. "aten.bmm"; a dict keeps the order
        return func(*args, **(kwargs or {}))


_OpRecorder = OpRecorder  # the earlier, private name


def aten_ops_called(fn, *args, **kwargs) -> list[str]:
    """Names of the aten operators that ``fn(*args, **kwargs)`` ran, each once, in order of first call.

    These are the operators that pass the dispatcher's Python hook while it is active: an operator made of
    others is seen in its pieces, but what a C++ kernel calls inside itself is not (``torch.profiler`` sees
    that). For ``F.scaled_dot_product_attention`` the list names the backend that did the work,
    e.g. ``['aten._scaled_dot_product_flash_attention_for_cpu']`` (a fused kernel), or
    ``aten.bmm`` and ``aten._safe_softmax`` (the math fallback, which builds the weights).
    Call it outside ``torch.inference_mode`` (inside it, the dispatcher hides the choice).
    """
    _refuse_inference_mode("aten_ops_called")
    recorder = OpRecorder()
    with recorder:
        fn(*args, **kwargs)
    return list(recorder.names)


@contextlib.contextmanager
def _quiet_stderr():
    # PyTorch's profiler writes a start and a stop line to the process's stderr (file descriptor 2) in C++.
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (a windowless Python): nothing to quiet
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def ops_inside(fn, operator: str, *args, **kwargs) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape of its first input)`` of each aten operator that ``operator`` (e.g.
    ``"aten._native_multi_head_attention"``) called directly inside itself while ``fn(*args, **kwargs)`` ran, in
    order; empty if it did not run. Unlike :func:`aten_ops_called`, this sees inside a C++ kernel: it runs ``fn``
    under PyTorch's profiler (``torch.profiler.profile``), which records nested calls too. Names as ``"aten.bmm"``.
    """
    with _quiet_stderr(), torch.profiler.profile(record_shapes=True) as profiled:
        fn(*args, **kwargs)
    found = []
    for event in profiled.events():
        if event.name.replace("::", ".") == operator:
            for child in event.cpu_children:
                shapes = child.input_shapes
                found.append((child.name.replace("::", "."), tuple(shapes[0]) if shapes and shapes[0] else ()))
    return found


# The aten operators of SDPA's fused backends: each computes attention tile by tile, without the (T, T) weights.
FUSED_SDPA_KERNELS = frozenset({
    "aten._scaled_dot_product_flash_attention_for_cpu",  # CPU
    "aten._scaled_dot_product_flash_attention",          # CUDA: FlashAttention-2
    "aten._scaled_dot_product_efficient_attention",      # CUDA: memory-efficient attention
    "aten._scaled_dot_product_cudnn_attention",          # CUDA: cuDNN
})


def builds_the_weights(ops: list[str]) -> bool:
    """Whether a list from :func:`aten_ops_called` took the explicit (math) path rather than a fused kernel."""
    return not FUSED_SDPA_KERNELS & set(ops) or "aten._safe_softmax" in ops or "aten._softmax" in ops
