"""Notebook 12's model read off its weights: QK and OV circuits, composition scores, path ablations, logit attribution.

With no MLP and no LayerNorm, :class:`~helpers.induction.InductionModel` is a sum of paths that multiply out
exactly (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"). The matrices here follow the
course's notation card, a stream vector ``x`` being a *row* (``q = x W_q``): head ``h`` of a layer has

* ``W_QK = W_q^h (W_k^h)^T / sqrt(D)`` ``(d_model, d_model)``, so that its score of query ``x`` for key ``y`` is
  ``x W_QK y^T`` (the ``1 / sqrt(D)`` of the course's scaled scores is folded in);
* ``W_OV = W_v^h W_o^h`` ``(d_model, d_model)``: attending to ``y`` with weight 1 writes ``y W_OV`` into the stream.

``W_q^h``, ``W_k^h``, ``W_v^h`` are head ``h``'s ``D`` columns of the card's ``W_q`` (``W_query.weight.T``: PyTorch
stores ``y = x W^T``), ``W_o^h`` its ``D`` rows of ``W_o`` (``out_proj.weight.T``). Elhage et al. write vectors as
columns, so their ``W_OV`` is the transpose of ours and their ``W_QK`` is the same matrix (without the
``1 / sqrt(D)``): their Q-score ``||W_QK^T W_OV||`` is our ``||W_OV^0 W_QK||`` and their K-score ``||W_QK W_OV||``
our ``||W_OV^0 W_QK^T||``. Frobenius norms and eigenvalues ignore a transpose and the scores a scale, so the
scores here are theirs. Circuits on tokens put the embedding
``E`` (``token_embedding.weight``) on both sides: ``V x V``, rows indexed by the query token (QK) or the token
attended to (OV).

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
    """Head ``head``'s ``W_q^h, W_k^h, W_v^h`` ``(d_model, D)`` and ``W_o^h`` ``(D, d_model)`` (the card's layout)."""
    _check_head(model, layer, head)
    attention = model.layers[layer]
    if attention.num_kv_heads != attention.num_heads:
        raise ValueError("the circuits need one key/value head per query head")
    rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    return (attention.W_query.weight[rows].T, attention.W_key.weight[rows].T, attention.W_value.weight[rows].T,
            attention.out_proj.weight[:, rows].T)


def qk_matrix(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``W_QK = W_q^h (W_k^h)^T / sqrt(D)`` ``(d_model, d_model)``: the score of query ``x`` for key ``y`` is
    ``x W_QK y^T``."""
    w_q, w_k, _, _ = _head_weights(model, layer, head)
    return (w_q @ w_k.T / math.sqrt(w_q.shape[1])).detach()


def ov_matrix(model: InductionModel, layer: int, head: int) -> torch.Tensor:
    """``W_OV = W_v^h W_o^h`` ``(d_model, d_model)``: what attending to ``y`` writes into the stream, ``y W_OV``."""
    _, _, w_v, w_o = _head_weights(model, layer, head)
    return (w_v @ w_o).detach()


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
    alone: ``E W_OV W_unembed`` (the transpose of Elhage et al.'s ``W_U W_OV W_E``)."""
    _check_head(model, layer, head)
    embeddings = model.token_embedding.weight.detach()  # (V, d_model)
    return embeddings @ ov_matrix(model, layer, head) @ model.unembed.weight.detach().T  # W_unembed = weight.T


def composition_score(written: torch.Tensor, read: torch.Tensor) -> torch.Tensor:
    """``||written @ read||_F / (||written||_F ||read||_F)``, between 0 and 1 (Elhage et al. 2021).

    ``written``: what an earlier head writes (``y -> y W_OV``); ``read``: how a later head reads the stream. The
    score is 1 exactly when both matrices have rank 1 and the direction ``written`` writes is the direction
    ``read`` reads; 0 when ``read`` ignores everything ``written`` can write.
    """
    for name, matrix in (("written", written), ("read", read)):
        if not isinstance(matrix, torch.Tensor) or matrix.dim() != 2 or not matrix.is_floating_point():
            raise TypeError(f"{name} must be a 2-D floating-point tensor")
        if not torch.linalg.matrix_norm(matrix) > 0:
            raise ValueError(f"{name} must not be all zeros")
    if written.shape[1] != read.shape[0]:
        raise ValueError(f"written {tuple(written.shape)} and read {tuple(read.shape)} cannot be multiplied")
    norm = torch.linalg.matrix_norm
    return norm(written @ read) / (norm(written) * norm(read))


def composition_scores(model: InductionModel) -> dict[str, torch.Tensor]:
    """``{"Q", "K", "V"}`` -> ``(H, H)``: entry ``[h0, h1]`` scores how much layer 1 head ``h1`` reads layer 0 head
    ``h0``'s output through its queries, keys or values (Elhage et al. 2021), with ``W_OV^0`` layer 0 head ``h0``'s:

    Q: ``||W_OV^0 W_QK||``, K: ``||W_OV^0 W_QK^T||``, V: ``||W_OV^0 W_OV^1||``, each over the product of the norms
    (a query ``x = z W_OV^0`` scores ``z W_OV^0 W_QK y^T``; a key ``y = z W_OV^0`` enters as ``W_QK W_OV^0^T z^T``).
    """
    _check_model(model)
    if model.num_layers != 2:
        raise ValueError(f"composition scores need a model of two layers, got {model.num_layers}")
    heads = range(model.num_heads)
    written = [ov_matrix(model, 0, h0) for h0 in heads]
    reads = {"Q": [qk_matrix(model, 1, h1) for h1 in heads]}
    reads["K"] = [w_qk.T for w_qk in reads["Q"]]
    reads["V"] = [ov_matrix(model, 1, h1) for h1 in heads]
    return {side: torch.stack([torch.stack([composition_score(w, r) for r in reads[side]]) for w in written])
            for side in "QKV"}


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
    with the read-out's own bias counted in ``"biases"``. ``parts.sum(0)`` equals ``model(token_ids)`` (the model has
    no final LayerNorm to divide by). Each head's part uses its actual weights on ``token_ids``. A layer-0 head's part
    is only its *direct* path; a layer-1 head's part, ``sum_j a_ij x1_j W_OV``, reads the whole stream ``x1`` through
    its values, so it holds that head's direct path and its pair terms with the layer-0 heads (Elhage et al.'s
    virtual heads) and layer 0's bias read the same way. What layer 0 changes through layer 1's queries and keys
    sets the weights ``a_ij`` and is credited to no part.
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
    """``(V, V)``: ``E W_QK (E W_OV^0)^T``, the score layer 1 head ``head1`` gives a query token (row) for a key
    where layer 0 head ``head0`` wrote a token (column) with weight 1: K-composition, on tokens."""
    _check_head(model, 0, head0)
    _check_head(model, 1, head1)
    embeddings = model.token_embedding.weight.detach()
    return embeddings @ qk_matrix(model, 1, head1) @ (embeddings @ ov_matrix(model, 0, head0)).T
