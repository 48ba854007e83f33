"""Attention sinks: where heads with nothing to look at put their weight, and caches that keep the sink.

A softmax row sums to 1, so a head that has nothing useful to read must still put its weight somewhere; trained
models often pile it on the first token (an *attention sink*; Xiao et al. 2023). A rolling cache (notebook 11)
that evicts that token changes what such heads compute; keeping the first token plus the window
(:class:`SinkCache`, "StreamingLLM" in Xiao et al. 2023) keeps it.

Shapes: ``B`` batch, ``T`` tokens, ``H`` heads, ``V`` ``vocab_size``, ``D`` ``head_dim``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._checks import check_float_tensor, check_positive_int
from .gqa import KVCache
from .induction import InductionModel

__all__ = ["start_token_weight", "SinkCache", "streaming_logits"]


def start_token_weight(attn_weights: torch.Tensor, periods: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean weight on key 0 (the start token): ``(before, after)``, each ``(H,)``.

    ``attn_weights`` ``(B, H, T, T)``, ``periods`` ``(B,)``. ``before``: the queries at positions
    ``1 .. Δ`` (Δ: the period), whose token has not occurred yet (nothing to copy); ``after``: the queries from ``Δ + 1`` on.
    """
    check_float_tensor("attn_weights", attn_weights)
    if attn_weights.dim() != 4 or periods.shape != attn_weights.shape[:1]:
        raise ValueError(f"need attn_weights (B, H, T, T) and periods (B,), got {tuple(attn_weights.shape)} "
                         f"and {tuple(periods.shape)}")
    positions = torch.arange(attn_weights.shape[-2])[None, :]  # (1, T)
    periods = periods.to("cpu")[:, None]
    first_period = (positions >= 1) & (positions <= periods)  # (B, T): nothing to copy yet
    repeats = positions > periods  # (B, T): the token occurred before
    on_start = attn_weights[..., 0].transpose(0, 1).cpu()  # (H, B, T): a[i, 0]
    return on_start[:, first_period].mean(dim=-1), on_start[:, repeats].mean(dim=-1)


class SinkCache(KVCache):
    """A rolling cache that also keeps the first ``num_sinks`` tokens: ``num_sinks + window_size`` entries at most.

    ``update`` returns the kept entries and the new ones, like :class:`~helpers.gqa.KVCache`, then forgets the
    oldest entry that is neither a sink nor among the last ``window_size``.
    """

    def __init__(self, window_size: int, num_sinks: int = 1):
        check_positive_int("window_size", window_size)
        check_positive_int("num_sinks", num_sinks)
        super().__init__()
        self.sink_window, self.num_sinks = window_size, num_sinks

    def __repr__(self) -> str:
        return (f"SinkCache(entries={len(self)}, num_seen={self.num_seen}, num_sinks={self.num_sinks}, "
                f"window_size={self.sink_window})")

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = super().update(keys, values)  # held + new; the parent keeps them all (no window)
        if len(self) > self.num_sinks + self.sink_window:
            sinks, recent = slice(0, self.num_sinks), slice(-self.sink_window, None)
            self.keys = torch.cat([self.keys[:, :, sinks], self.keys[:, :, recent]], dim=2)
            self.values = torch.cat([self.values[:, :, sinks], self.values[:, :, recent]], dim=2)
        return keys, values


@torch.no_grad()
def streaming_logits(model: InductionModel, token_ids: torch.Tensor,
                     new_cache: Callable[[], KVCache] | None = None) -> torch.Tensor:
    """Logits ``(B, T, V)`` computed one token at a time, each layer keeping its keys and values in a cache.

    ``new_cache()`` makes one layer's cache (default: a full :class:`~helpers.gqa.KVCache`, which gives the
    logits of a full pass); ``lambda: KVCache(window_size=w)`` is a rolling cache, ``lambda: SinkCache(w)`` keeps
    the start token too.
    """
    new_cache = KVCache if new_cache is None else new_cache
    model.eval()
    caches = [new_cache() for _ in range(model.num_layers)]
    logits = [model(token_ids[:, i:i + 1], caches=caches) for i in range(token_ids.shape[1])]  # T x (B, 1, V)
    return torch.cat(logits, dim=1)
