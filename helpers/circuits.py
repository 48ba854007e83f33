"""Notebook 12's model read off its weights: QK and OV circuits, composition scores, path ablations, logit attribution.

With no MLP and no LayerNorm, :class:`~helpers.induction.InductionModel` is a sum of paths that multiply out
exactly (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"). The matrices here follow the
paper's convention, a residual-stream vector ``x`` being a *column*: head ``h`` of a layer has

* ``W_QK = W_Q^T W_K / sqrt(D)`` ``(d_model, d_model)``, so that its score of query ``x_q`` for key ``x_k`` is
  ``x_q^T W_QK x_k`` (the ``1 / sqrt(D)`` of the course's scaled scores is folded in);
* ``W_OV = W_O W_V`` ``(d_model, d_model)``: attending to ``x`` with weight 1 writes ``W_OV x`` into the stream.

``W_Q``, ``W_K``, ``W_V`` are head ``h``'s ``D`` rows of ``nn.Linear.weight`` of ``W_query``, ``W_key``,
``W_value``, and ``W_O`` its ``D`` columns of ``out_proj.weight``: PyTorch stores ``y = x W^T``, the column
convention's ``W x``. Circuits on tokens put the embedding ``E`` (``token_embedding.weight``, one row per token) on
both sides, so they are ``V x V`` with rows indexed by the query token (QK) or the token attended to (OV).

Shapes: ``B`` batch, ``T`` tokens, ``H`` heads, ``V`` ``vocab_size``, ``D`` ``head_dim``.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch

from .attention import scaled_dot_product_attention
from .induction import InductionModel
from .masks import causal_mask

__all__ = ["qk_matrix", "ov_matrix", "qk_circuit", "positional_qk_circuit", "ov_circuit", "composition_score",
           "composition_scores", "composed_qk_circuit", "copying_eigenvalue_score", "head_outputs", "path_ablated_forward",
           "direct_logit_attribution"]

SIDES = ("query", "key", "value", "residual")


def _check_model(model) -> None:
    if not isinstance(model, InductionModel):
        raise TypeError(f"model must be an InductionModel, got {type(model).__name__}")


def _check_head(model: InductionModel, layer, head) -> None:
    _check_model(model)
    for name, value, limit in (("layer", layer, model.num_layers), ("head", head, model.num_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
            raise ValueError(f"{name} must be an int in [0, {limit}), got {value!r}")


def _head_weights(model: InductionModel, layer: int, head: int):
    """Head ``head``'s ``W_Q, W_K, W_V`` ``(D, d_model)`` and ``W_O`` ``(d_model, D)`` (column convention)."""
    _check_head(model, layer, head)
    attention = model.layers[layer]
    if attention.num_kv_heads != attention.num_heads:
        raise ValueError("the circuits need one key/value head per query head")
    rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    return (attention.W_query.weight[rows], attention.W_key.weight[rows], attention.W_value.weight[rows],
            attention.out_proj.weight[:, rows])


def qk_matrix(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``W_QK = W_Q^T W_K / sqrt(D)`` ``(d_model, d_model)``: the score of query ``x_q`` for key ``x_k`` is
    ``x_q^T W_QK x_k``."""
    w_q, w_k, _, _ = _head_weights(model, layer, head)
    return (w_q.T @ w_k / math.sqrt(w_q.shape[0])).detach()


def ov_matrix(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``W_OV = W_O W_V`` ``(d_model, d_model)``: what attending to ``x`` writes into the stream, ``W_OV x``."""
    _, _, w_v, w_o = _head_weights(model, layer, head)
    return (w_o @ w_v).detach()


def qk_circuit(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``(V, V)``: ``E W_QK E^T``, the score a query token (row) gives a key token (column) from the token
    embeddings alone (no positions, nothing an earlier layer wrote)."""
    _check_head(model, layer, head)
    embeddings = model.token_embedding.weight.detach()  # (V, d_model)
    return embeddings @ qk_matrix(model, layer, head) @ embeddings.T


def positional_qk_circuit(model: InductionModel, layer: int, head: int, num_tokens: int | None = None
                          ) -> torch.Tensor:
    """``(T, T)``: ``P W_QK P^T``, the score query position ``i`` (row) gives key position ``j`` from the position
    vectors alone. The future (``j > i``) is ``nan``: the causal mask hides it."""
    _check_head(model, layer, head)
    num_tokens = model.context_length if num_tokens is None else num_tokens
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 1 <= num_tokens <= model.context_length:
        raise ValueError(f"num_tokens must be an int in [1, {model.context_length}], got {num_tokens!r}")
    positions = model.position_embedding.weight[:num_tokens].detach()  # (T, d_model)
    scores = positions @ qk_matrix(model, layer, head) @ positions.T
    return scores.masked_fill(causal_mask(num_tokens), float("nan"))


def ov_circuit(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``(V, V)``: row ``t`` holds the logits that attending to token ``t``'s embedding writes, through this head
    alone (``E W_OV^T W_unembed``; the transpose of Elhage et al.'s ``W_U W_OV W_E``)."""
    _check_head(model, layer, head)
    embeddings = model.token_embedding.weight.detach()  # (V, d_model)
    return embeddings @ ov_matrix(model, layer, head).T @ model.unembed.weight.detach().T


def composition_score(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``||left @ right||_F / (||left||_F ||right||_F)``, between 0 and 1 (Elhage et al. 2021).

    It is 1 exactly when both matrices have rank 1 and what ``right`` writes (its column space) is what ``left``
    reads (its row space); 0 when ``left`` ignores everything ``right`` can write.
    """
    for name, matrix in (("left", left), ("right", right)):
        if not isinstance(matrix, torch.Tensor) or matrix.dim() != 2 or not matrix.is_floating_point():
            raise TypeError(f"{name} must be a 2-D floating-point tensor")
        if not torch.linalg.matrix_norm(matrix) > 0:
            raise ValueError(f"{name} must not be all zeros")
    if left.shape[1] != right.shape[0]:
        raise ValueError(f"left {tuple(left.shape)} and right {tuple(right.shape)} cannot be multiplied")
    norm = torch.linalg.matrix_norm
    return norm(left @ right) / (norm(left) * norm(right))


def composition_scores(model: InductionModel) -> dict[str, torch.Tensor]:
    """``{"Q", "K", "V"}`` -> ``(H, H)``: entry ``[h0, h1]`` scores how much layer 1 head ``h1`` reads layer 0 head
    ``h0``'s output through its queries, keys or values (Elhage et al. 2021):

    Q: ``||W_QK^T W_OV^0||``, K: ``||W_QK W_OV^0||``, V: ``||W_OV^1 W_OV^0||``, each over the product of the norms.
    """
    _check_model(model)
    if model.num_layers != 2:
        raise ValueError(f"composition scores need a model of two layers, got {model.num_layers}")
    scores = {side: torch.zeros(model.num_heads, model.num_heads) for side in "QKV"}
    for h0 in range(model.num_heads):
        written = ov_matrix(model, 0, h0)  # what layer 0 head h0 writes
        for h1 in range(model.num_heads):
            reads = qk_matrix(model, 1, h1)
            scores["Q"][h0, h1] = composition_score(reads.T, written)  # x_q = W_OV x: x_q^T W_QK = (W_QK^T x_q)^T
            scores["K"][h0, h1] = composition_score(reads, written)  # x_k = W_OV x
            scores["V"][h0, h1] = composition_score(ov_matrix(model, 1, h1), written)
    return scores


def copying_eigenvalue_score(circuit: torch.Tensor) -> torch.Tensor:
    """``sum(λ) / sum(|λ|)`` over the eigenvalues ``λ`` of a square circuit, between -1 and 1.

    Elhage et al. (2021) call an OV circuit a copying circuit when its eigenvalues are mostly positive real
    numbers: a token written in raises its own logit, and a positive eigenvector is amplified. The sum of the
    eigenvalues is real (the trace), so the score is too.
    """
    if not isinstance(circuit, torch.Tensor) or circuit.dim() != 2 or circuit.shape[0] != circuit.shape[1]:
        raise ValueError("circuit must be a square 2-D tensor, such as ov_circuit(model, layer, head)")
    eigenvalues = torch.linalg.eigvals(circuit.double())
    return (eigenvalues.sum().real / eigenvalues.abs().sum()).float()


def _check_ids(model: InductionModel, token_ids) -> None:
    if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long or token_ids.dim() != 2:
        raise TypeError("token_ids must be a torch.long tensor of shape (batch_size, num_tokens)")
    if token_ids.shape[1] > model.context_length:
        raise ValueError(f"token_ids has {token_ids.shape[1]} tokens, more than context_length={model.context_length}")


def head_outputs(model: InductionModel, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(outputs (B, H, T, d_model), weights (B, H, T, T))``: what each head of ``layer`` adds to the stream ``x``.

    Head ``h`` adds ``z_h W_O^h`` (its context vectors through its columns of ``W_o``); the layer's output is
    the sum over heads plus ``out_proj.bias``.
    """
    _check_head(model, layer, 0)
    attention = model.layers[layer]
    heads = attention.num_heads
    queries, keys, values = (attention._split(proj(x), heads)
                             for proj in (attention.W_query, attention.W_key, attention.W_value))  # (B, H, T, D)
    z, weights = scaled_dot_product_attention(queries, keys, values, mask=causal_mask(x.shape[1], device=x.device),
                                              training=False)  # (B, H, T, D), (B, H, T, T)
    w_o = attention.out_proj.weight.view(-1, heads, attention.head_dim)  # (d_model, H, D)
    return torch.einsum("bhtd,mhd->bhtm", z, w_o), weights


@torch.no_grad()
def path_ablated_forward(model: InductionModel, token_ids: torch.Tensor, head: int, sides: Collection[str],
                         mode: str = "mean") -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits (B, T, V), layer 1's weights (B, H, T, T))`` with layer 0 head ``head`` removed from some reads.

    Layer 1 reads the stream four times: to form its ``"query"``, its ``"key"`` and its ``"value"`` vectors, and
    the ``"residual"`` path carries the stream past it to the read-out. The reads named in ``sides`` see the
    stream with the head's output replaced; the others see it whole. ``mode="mean"`` replaces the output by its
    mean over the sequences of ``token_ids`` at each position (the information goes, its average stays);
    ``mode="zero"`` by zero. All four sides with ``"zero"`` is :func:`~helpers.induction.knocked_out`.
    """
    _check_model(model)
    _check_ids(model, token_ids)
    if model.num_layers != 2:
        raise ValueError(f"path ablation needs a model of two layers, got {model.num_layers}")
    _check_head(model, 0, head)
    if isinstance(sides, str) or not set(sides) <= set(SIDES):
        raise ValueError(f"sides must be a collection of names from {SIDES}, got {sides!r}")
    if mode not in ("mean", "zero"):
        raise ValueError(f"mode must be 'mean' or 'zero', got {mode!r}")
    num_tokens = token_ids.shape[1]
    x0 = model.token_embedding(token_ids) + model.position_embedding.weight[:num_tokens]  # (B, T, d_model)
    outputs, _ = head_outputs(model, 0, x0)  # (B, H, T, d_model)
    x1 = x0 + outputs.sum(dim=1) + model.layers[0].out_proj.bias  # the stream entering layer 1
    removed = outputs[:, head]  # (B, T, d_model)
    replacement = removed.mean(dim=0, keepdim=True) if mode == "mean" else torch.zeros_like(removed[:1])
    ablated = x1 - removed + replacement
    read = {side: ablated if side in sides else x1 for side in SIDES}
    layer = model.layers[1]
    queries = layer._split(layer.W_query(read["query"]), layer.num_heads)  # (B, H, T, D)
    keys = layer._split(layer.W_key(read["key"]), layer.num_heads)
    values = layer._split(layer.W_value(read["value"]), layer.num_heads)
    z, weights = scaled_dot_product_attention(queries, keys, values, mask=causal_mask(num_tokens, device=x0.device),
                                              training=False)
    z = z.transpose(1, 2).reshape(token_ids.shape[0], num_tokens, -1)  # (B, T, H * D)
    return model.unembed(read["residual"] + layer.out_proj(z)), weights


@torch.no_grad()
def direct_logit_attribution(model: InductionModel, token_ids: torch.Tensor
                             ) -> tuple[list[str], torch.Tensor]:
    """``(names, parts (C, B, T, V))``: the logits split into what each piece of the stream writes directly.

    The final stream is a sum: the embeddings (token plus position), every head's output (``"L0H1"``, ...) and
    the biases of ``W_o``; the read-out is linear, so the logits are the sum of each piece times ``W_unembed``,
    with the read-out's own bias counted in ``"biases"``. ``parts.sum(0)`` equals ``model(token_ids)``. A layer-0
    head's part is only its *direct* path: what it changes through layer 1 is counted in layer 1's heads.
    """
    _check_model(model)
    _check_ids(model, token_ids)
    num_tokens = token_ids.shape[1]
    x = model.token_embedding(token_ids) + model.position_embedding.weight[:num_tokens]
    names, pieces, biases = ["embeddings"], [x], torch.zeros_like(x[0, 0])
    for layer in range(model.num_layers):
        outputs, _ = head_outputs(model, layer, x)  # (B, H, T, d_model)
        bias = model.layers[layer].out_proj.bias
        names += [f"L{layer}H{h}" for h in range(model.num_heads)]
        pieces += list(outputs.unbind(dim=1))
        biases = biases + bias
        x = x + outputs.sum(dim=1) + bias
    unembed = model.unembed.weight  # (V, d_model)
    parts = [piece @ unembed.T for piece in pieces]
    parts.append((biases @ unembed.T + model.unembed.bias).expand_as(parts[0]))
    return names + ["biases"], torch.stack(parts)


def composed_qk_circuit(model: InductionModel, head0: int, head1: int) -> torch.Tensor:
    """``(V, V)``: ``E W_QK^{1,h1} W_OV^{0,h0} E^T``, the score layer 1 head ``head1`` gives a query token (row)
    for a key where layer 0 head ``head0`` wrote a token (column) with weight 1: K-composition on tokens."""
    _check_head(model, 0, head0)
    _check_head(model, 1, head1)
    embeddings = model.token_embedding.weight.detach()
    return embeddings @ qk_matrix(model, 1, head1) @ ov_matrix(model, 0, head0) @ embeddings.T
