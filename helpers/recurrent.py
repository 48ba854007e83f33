"""Linear attention: a positive feature map instead of the softmax, and a fixed-size state instead of a cache.

Katharopoulos et al. (2020) replace ``exp(q . k / sqrt(d_k))`` by ``phi(q) . phi(k)`` with ``phi(x) = elu(x) + 1``
(positive, so every weight stays positive and the normaliser never vanishes). The causal output of query ``t``,

    o_t = sum_{j <= t} (phi(q_t) . phi(k_j)) v_j / sum_{j <= t} phi(q_t) . phi(k_j),

regroups as ``o_t = phi(q_t) S_t / (phi(q_t) . n_t)`` with the running state ``S_t = sum_{j <= t} phi(k_j)^T v_j``
``(d_k, d_v)`` and normaliser ``n_t = sum_{j <= t} phi(k_j)`` ``(d_k,)``: the same numbers, in a fixed memory per
sequence, however long it is. The delta rule (DeltaNet; Schlag et al. 2021, Yang et al. 2024) writes into the state
by correcting what a key already reads, ``S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})``, and reads ``o_t = q_t S_t``.

Shapes: ``(..., T, d_k)`` queries and keys, ``(..., T, d_v)`` values; ``...`` is e.g. ``(B, H)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ._checks import check_float_tensor, check_positive_int
from .attention import scaled_dot_product_attention
from .masks import causal_mask

__all__ = ["elu_feature_map", "linear_attention", "linear_attention_recurrent", "delta_rule_recurrent",
           "RECALL_METHODS", "associative_recall"]

RECALL_METHODS = ("softmax", "linear", "delta rule", "least squares")


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``phi(x) = elu(x) + 1``: ``x + 1`` for ``x > 0``, ``exp(x)`` below; positive. Shape unchanged.

    Written as ``exp(x)`` rather than ``F.elu(x) + 1``: in float32, ``elu(-30) + 1 = (e^-30 - 1) + 1`` rounds to 0.
    """
    check_float_tensor("x", x)
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))


def _check_qkv(queries, keys, values) -> None:
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        check_float_tensor(name, tensor)
        if tensor.dim() < 2:
            raise ValueError(f"{name} must have shape (..., num_tokens, features), got {tuple(tensor.shape)}")
    if queries.shape[:-1] != keys.shape[:-1] or queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries and keys must have the same shape (..., num_tokens, d_k), got "
                         f"{tuple(queries.shape)} and {tuple(keys.shape)}")
    if values.shape[:-1] != keys.shape[:-1]:
        raise ValueError(f"values must have one row per key, shape (..., num_tokens, d_v), got {tuple(values.shape)} "
                         f"for keys {tuple(keys.shape)}")


def linear_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The parallel, masked form: ``(context_vecs (..., T, d_v), attn_weights (..., T, T))``, causal.

    ``attn_weights[..., t, j] = phi(q_t) . phi(k_j) / sum_{i <= t} phi(q_t) . phi(k_i)`` for ``j <= t``, else 0.
    """
    _check_qkv(queries, keys, values)
    similarities = feature_map(queries) @ feature_map(keys).transpose(-2, -1)  # (..., T, T): all positive
    future = causal_mask(queries.shape[-2]).to(queries.device)                  # (T, T), True above the diagonal
    similarities = similarities.masked_fill(future, 0.0)                        # a zero, not -inf: no softmax here
    attn_weights = similarities / similarities.sum(dim=-1, keepdim=True)       # rows sum to 1
    return attn_weights @ values, attn_weights                                  # (..., T, d_v)


def linear_attention_recurrent(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                               feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map,
                               state: tuple[torch.Tensor, torch.Tensor] | None = None
                               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The recurrent form, one token at a time: ``(context_vecs (..., T, d_v), (state (..., d_k, d_v), normaliser (..., d_k)))``.

    ``state`` continues from an earlier call (the state it returned), as a cache would.
    """
    _check_qkv(queries, keys, values)
    phi_q, phi_k = feature_map(queries), feature_map(keys)                      # (..., T, d_k)
    if state is None:
        state = queries.new_zeros(*queries.shape[:-2], queries.shape[-1], values.shape[-1])  # (..., d_k, d_v)
        normaliser = queries.new_zeros(*queries.shape[:-2], queries.shape[-1])               # (..., d_k)
    else:
        state, normaliser = state
    outputs = []
    for t in range(queries.shape[-2]):
        state = state + phi_k[..., t, :, None] * values[..., t, None, :]        # add phi(k_t)^T v_t: (..., d_k, d_v)
        normaliser = normaliser + phi_k[..., t, :]                               # add phi(k_t)
        numerator = (phi_q[..., t, None, :] @ state)[..., 0, :]                 # phi(q_t) S_t: (..., d_v)
        denominator = (phi_q[..., t, :] * normaliser).sum(dim=-1, keepdim=True)  # phi(q_t) . n_t: (..., 1)
        outputs.append(numerator / denominator)
    return torch.stack(outputs, dim=-2), (state, normaliser)


def delta_rule_recurrent(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, betas: torch.Tensor,
                         state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule: ``(context_vecs (..., T, d_v), state (..., d_k, d_v))``, keys best of unit length.

    ``S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})`` with ``betas`` ``(..., T)`` in ``[0, 1]``: with
    ``beta = 1`` the key ``k_t`` afterwards reads exactly ``v_t``; ``o_t = q_t S_t``.
    """
    _check_qkv(queries, keys, values)
    check_float_tensor("betas", betas)
    if betas.shape != keys.shape[:-1]:
        raise ValueError(f"betas must have shape (..., num_tokens) = {tuple(keys.shape[:-1])}, "
                         f"got {tuple(betas.shape)}")
    if state is None:
        state = queries.new_zeros(*queries.shape[:-2], queries.shape[-1], values.shape[-1])
    outputs = []
    for t in range(queries.shape[-2]):
        key = keys[..., t, None, :]                                              # (..., 1, d_k)
        error = values[..., t, None, :] - key @ state                            # what k_t should read, minus what it reads
        state = state + betas[..., t, None, None] * key.transpose(-2, -1) @ error  # (..., d_k, 1) @ (..., 1, d_v)
        outputs.append((queries[..., t, None, :] @ state)[..., 0, :])           # q_t S_t
    return torch.stack(outputs, dim=-2), state


def associative_recall(method: str, num_pairs: int, dim: int = 16, sharpness: float = 4.0, trials: int = 100,
                       seed: int = 0) -> float:
    """The fraction of look-ups that find the right value after ``num_pairs`` key/value pairs were stored.

    Keys and values are random unit vectors in ``dim`` dimensions (``trials`` sets of ``num_pairs``); each stored
    key, as a query, must read back its own value: a look-up is right when the value read is closer (cosine) to
    that value than to any other stored one. Queries and keys are scaled by ``sharpness`` for the softmax and for
    linear attention alike. ``method``: ``"softmax"`` attends over all stored pairs (the cache), ``"linear"`` reads
    the state and normaliser of :func:`linear_attention_recurrent`, ``"delta rule"`` the state of
    :func:`delta_rule_recurrent` (``beta = 1``), and ``"least squares"`` the ``(dim, dim)`` state that least-squares
    fits ``keys @ state = values``: no state of that size reads the values back with a smaller squared error (a strong
    reference, not a bound on the nearest-value accuracy counted here).
    """
    if method not in RECALL_METHODS:
        raise ValueError(f"method must be one of {RECALL_METHODS}, got {method!r}")
    check_positive_int("num_pairs", num_pairs)
    check_positive_int("dim", dim)
    check_positive_int("trials", trials)
    generator = torch.Generator().manual_seed(seed * 1000 + num_pairs)
    keys = F.normalize(torch.randn(trials, num_pairs, dim, generator=generator), dim=-1)    # (trials, N, d)
    values = F.normalize(torch.randn(trials, num_pairs, dim, generator=generator), dim=-1)  # (trials, N, d)
    if method == "softmax":
        read, _ = scaled_dot_product_attention(sharpness * keys, sharpness * keys, values)  # every key cached
    elif method == "linear":
        _, (state, normaliser) = linear_attention_recurrent(sharpness * keys, sharpness * keys, values)  # write all
        phi_q = elu_feature_map(sharpness * keys)                                          # then read each key
        read = (phi_q @ state) / (phi_q * normaliser[:, None]).sum(dim=-1, keepdim=True)
    elif method == "delta rule":
        _, state = delta_rule_recurrent(keys, keys, values, torch.ones(trials, num_pairs))
        read = keys @ state
    else:
        read = keys @ (torch.linalg.pinv(keys) @ values)                                   # the least-squares S
    closeness = F.normalize(read, dim=-1) @ values.transpose(-2, -1)                       # (trials, N, N) cosines
    return (closeness.argmax(dim=-1) == torch.arange(num_pairs)).float().mean().item()
