"""Exercises for notebook 06: multi-head attention.

1. ``causal_multi_head`` (the capstone): write causal multi-head attention as an ``nn.Module`` class, from an empty
   class, whose ``forward(x, return_weights=True)`` also returns the per-head weights (the lesson never writes that
   part). The checker builds the learner's class, copies the weights of the course's
   :class:`~helpers.modules.MultiHeadAttention` into it and compares the two on batches, several head counts,
   ``d_in != d_out``, sharply peaked scores, in ``eval()`` and with dropout in ``train()``. Each common mistake
   (view without transpose, the wrong scale, a mask off by one or inverted, softmax over the wrong axis, the merge in
   the wrong order, weights not registered as parameters, dropout in the wrong place; weights averaged over the
   heads, in the wrong axis order, the scores instead of the weights) has its own message.
2. ``fused_qkv_bug`` (spot the bug): one fused projection holds queries, keys and values, and the code reads its
   features in the wrong order (a bug the lesson does not show; converting checkpoints between layouts hits it).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ..modules import CausalAttention, MultiHeadAttention, MultiHeadAttentionWrapper
from . import core as _core
from ._inputs import randn
from .core import Case, Feedback, FunctionExercise, Mistake, SpotTheBug, _describe, _replacing, _watching, forbids

__all__ = ["causal_multi_head", "fused_qkv_bug"]


# --- 1. the capstone: causal multi-head attention from an empty class ------------------------------------------
PROJECTIONS = ("W_query", "W_key", "W_value", "out_proj")


@dataclass(frozen=True)
class _Layer:
    """One layer the checker builds, and the batch it runs on."""

    d_in: int
    d_out: int
    context_length: int
    dropout: float
    num_heads: int
    qkv_bias: bool
    batch_size: int
    num_tokens: int
    scale: float = 1.0        # inputs times this: large scale = sharply peaked softmax rows

    @property
    def args(self) -> tuple:
        return self.d_in, self.d_out, self.context_length, self.dropout, self.num_heads

    @property
    def description(self) -> str:
        text = (f"MultiHeadAttention(d_in={self.d_in}, d_out={self.d_out}, context_length={self.context_length}, "
                f"dropout={self.dropout}, num_heads={self.num_heads}, qkv_bias={self.qkv_bias}) on a batch "
                f"({self.batch_size}, {self.num_tokens}, {self.d_in})")
        return text + (f" times {self.scale:g} (sharply peaked weights)" if self.scale != 1.0 else "")


LAYERS = (
    _Layer(3, 12, 6, 0.0, 3, False, 2, 6),               # the lesson's layer
    _Layer(5, 8, 10, 0.1, 2, True, 3, 7),                # d_in != d_out, fewer tokens than context_length
    _Layer(8, 8, 4, 0.0, 1, False, 1, 4),                # one head
    _Layer(6, 24, 9, 0.2, 4, False, 2, 9),               # four heads, d_out > d_in
    _Layer(16, 12, 8, 0.5, 6, True, 2, 5),               # six heads of two features, d_out < d_in
    _Layer(4, 8, 5, 0.0, 2, False, 2, 5, scale=30.0),    # scores in the hundreds
    _Layer(6, 6, 3, 0.0, 3, False, 2, 1),                # a single token
)
TRAIN_LAYERS = tuple(layer for layer in LAYERS if layer.dropout > 0)


def _cases(generator: torch.Generator) -> list[Case]:
    """The layers as :class:`Case` objects: the constructor's arguments (for tools that list every exercise)."""
    return [Case(layer.description, layer.args, {"qkv_bias": layer.qkv_bias}) for layer in LAYERS]


class _SolutionMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)                      # W_o mixes the heads
        self.dropout = nn.Dropout(dropout)
        hide = torch.triu(torch.ones(context_length, context_length, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", hide)                           # True above the diagonal = a future token

    def split_heads(self, t):
        batch_size, num_tokens, d_out = t.shape
        t = t.view(batch_size, num_tokens, self.num_heads, self.head_dim)  # (B, T, d_out) -> (B, T, H, D)
        return t.transpose(1, 2)                                          # (B, T, H, D) -> (B, H, T, D)

    def forward(self, x, return_weights=False):
        batch_size, num_tokens, _ = x.shape
        queries = self.split_heads(self.W_query(x))                      # (B, T, d_in) -> (B, H, T, D)
        keys = self.split_heads(self.W_key(x))
        values = self.split_heads(self.W_value(x))
        attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(self.head_dim)  # (B, H, T, T)
        attn_scores = attn_scores.masked_fill(self.mask[:num_tokens, :num_tokens], float("-inf"))
        attn_weights = self.dropout(torch.softmax(attn_scores, dim=-1))  # over the keys: each row sums to 1
        context = (attn_weights @ values).transpose(1, 2)                # (B, H, T, D) -> (B, T, H, D)
        context = context.reshape(batch_size, num_tokens, -1)            # (B, T, H, D) -> (B, T, d_out)
        context = self.out_proj(context)
        return (context, attn_weights) if return_weights else context    # attn_weights: (B, H, T, T), per head


def _forward(layer: MultiHeadAttention, x: torch.Tensor, *, split="view_transpose", scale="head_dim",
             mask="causal", softmax_dim=-1, merge="transpose", out_proj=True, dropout_on="weights",
             training=False) -> torch.Tensor:
    """The reference layer's forward pass with one step done differently (a known mistake), for diagnosis."""
    b, t, _ = x.shape
    h, d, d_out = layer.num_heads, layer.head_dim, layer.d_out

    def heads(tensor):
        if split == "view_only":
            return tensor.reshape(b, h, t, d)                             # (B, T, d_out) read as (B, H, T, D)
        return tensor.view(b, t, h, d).transpose(1, 2)

    def dropout(tensor, where):
        return nn.functional.dropout(tensor, layer.dropout.p, training) if dropout_on == where else tensor

    queries, keys, values = (heads(proj(x)) for proj in (layer.W_query, layer.W_key, layer.W_value))
    width = {"head_dim": math.sqrt(d), "d_out": math.sqrt(d_out), "d_in": math.sqrt(x.shape[-1]),
             "no_sqrt": float(d), "none": 1.0}[scale]
    scores = dropout(queries @ keys.transpose(2, 3), "scores") / width
    rows, cols = torch.arange(t).unsqueeze(1), torch.arange(t)
    hide = {"causal": cols > rows, "hides_self": cols >= rows, "sees_next": cols > rows + 1,
            "hides_past": cols < rows, "keeps_future": cols <= rows, "none": torch.zeros(t, t, dtype=torch.bool),
            "after_softmax": cols > rows}[mask]
    if mask != "after_softmax":
        scores = scores.masked_fill(hide, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask == "after_softmax":
        weights = weights.masked_fill(hide, 0.0)
    context = dropout(weights, "weights") @ values                       # (B, H, T, D)
    context = dropout(context, "context")
    if merge == "transpose":
        merged = context.transpose(1, 2).reshape(b, t, d_out)
    elif merge == "no_transpose":
        merged = context.reshape(b, t, d_out)                            # (B, H, T, D) read as (B, T, d_out)
    else:                                                                 # "head_last": (B, T, D, H) order
        merged = context.permute(0, 2, 3, 1).reshape(b, t, d_out)
    out = layer.out_proj(merged) if out_proj else merged
    return dropout(out, "output")


_MISTAKES = [  # (what differs, message); checked in this order, the first match is reported
    ({"split": "view_only"},
     "your heads are cut wrongly: reading the (B, T, d_out) projections straight as (B, H, T, D) gives every "
     "'head' a block of whole tokens instead of its own head_dim features of every token. Every shape is right, "
     "so nothing complains. The features of one token must stay together: split the last axis first, then move "
     "the head axis."),
    ({"merge": "no_transpose"},
     "the heads' context vectors are merged in the wrong order: reading (B, H, T, D) straight as (B, T, d_out) "
     "fills one token's row with numbers of several tokens. Put the token axis back next to the batch axis "
     "before you join the heads' features."),
    ({"merge": "head_last"},
     "the heads' context vectors are merged in the wrong order: your merge interleaves the heads (head 0's "
     "feature 0, head 1's feature 0, ...). Head h's head_dim features must sit together, in features "
     "h*head_dim to (h+1)*head_dim - 1, before out_proj."),
    ({"scale": "d_out"},
     "your scores are divided by the square root of d_out, the whole layer's width. Each head's dot products run "
     "over its own head_dim features: that is the width to scale by."),
    ({"scale": "d_in"},
     "your scores are divided by the square root of d_in, the input width. Each head's dot products run over its "
     "own head_dim features: that is the width to scale by."),
    ({"scale": "no_sqrt"},
     "your scores are divided by head_dim itself. The scale is its square root."),
    ({"scale": "none"},
     "your scores are not scaled at all. Divide them by the square root of the width their dot products run "
     "over."),
    ({"mask": "hides_self"},
     "your mask is off by one: it hides each token's own position too (so token 0 sees nothing, and its row "
     "becomes nan). A token may see itself and every token before it."),
    ({"mask": "sees_next"},
     "your mask is off by one: each token still sees the next one. A token may see itself and every token "
     "before it, nothing after."),
    ({"mask": "hides_past"},
     "your mask is inverted: it hides the tokens before each token and lets it see the ones after. In the course, "
     "the mask is True where a score is hidden: above the diagonal."),
    ({"mask": "keeps_future"},
     "your mask is inverted: it hides each token and everything before it, and keeps only the future (the last "
     "token sees nothing: nan). In the course, the mask is True where a score is hidden: above the diagonal."),
    ({"mask": "none"},
     "your layer is not causal: every token sees every token, the later ones included. Hide the scores above "
     "the diagonal before the softmax."),
    ({"mask": "after_softmax"},
     "you set the hidden weights to zero after the softmax, so the rows no longer sum to 1. Hide the scores "
     "before the softmax (with -inf), and the softmax spreads each row over the visible tokens only."),
    ({"softmax_dim": -2},
     "your softmax runs over the queries (dim=-2), so each column sums to 1. Each row (one query, all its "
     "keys) must sum to 1: the softmax runs over the last axis."),
    ({"softmax_dim": 1},
     "your softmax runs over dim=1, which in (B, H, T, T) is the head axis: the weights of one query then sum to "
     "1 across heads. Each row (one query, all its keys) must sum to 1: the softmax runs over the last axis."),
    ({"out_proj": False},
     "your output skips out_proj: the merged heads must go through the output projection W_o."),
]

_DROPOUT_MISTAKES = [
    ({"dropout_on": "scores"},
     "in train() your dropout acts on the scores, before the softmax. It belongs on the attention weights, "
     "right after the softmax."),
    ({"dropout_on": "context"},
     "in train() your dropout acts on the context vectors. It belongs on the attention weights, right after "
     "the softmax, before they mix the values."),
    ({"dropout_on": "output"},
     "in train() your dropout acts on the layer's output. It belongs on the attention weights, right after the "
     "softmax, before they mix the values."),
]

_FORBIDDEN = ("torch.nn.functional.scaled_dot_product_attention", "helpers.attention.scaled_dot_product_attention",
              "helpers.scaled_dot_product_attention")
_READY_MADE = (MultiHeadAttention, MultiHeadAttentionWrapper, CausalAttention, nn.MultiheadAttention)


class _Coins:
    """While active, ``F.dropout`` and ``torch.dropout`` flip the same coins for everyone: call n of a run draws
    its keep-mask from a generator seeded with n, in the tensor's index order. Every call is recorded."""

    def __init__(self):
        self.calls: list[tuple[tuple[int, ...], float, bool]] = []
        self.per_head = False   # True: a (B, H, T, T) call draws as H calls on (B, T, T), head by head

    def dropout(self, input, p=0.5, training=True, inplace=False):
        if self.per_head and input.dim() == 4:   # the coins a loop over heads, one call per head, would get
            self.per_head = False
            try:
                return torch.stack([self.dropout(input[:, h], p, training) for h in range(input.shape[1])], dim=1)
            finally:
                self.per_head = True
        self.calls.append((tuple(input.shape), float(p), bool(training)))
        if not training or p == 0.0:
            return input
        if p == 1.0:
            return input * 0.0
        generator = torch.Generator().manual_seed(1000 + len(self.calls))
        keep = torch.rand(input.shape, generator=generator) >= p
        return input * keep.to(input.device) / (1.0 - p)

    def torch_dropout(self, input, p, train):
        return self.dropout(input, p, train)

    @contextlib.contextmanager
    def flipping(self, namespace: dict) -> Iterator[None]:
        self.calls = []
        with _replacing([(nn.functional, "dropout", self.dropout), (torch, "dropout", self.torch_dropout)],
                        namespace):   # the learner's own alias too, e.g. `from ... import dropout`
            yield


def _close(answer: torch.Tensor, right: torch.Tensor, atol=1e-5, rtol=1e-4) -> bool:
    """Same shape and values; survives inf and nan on either side (nan only equals nan, inf only itself)."""
    if not isinstance(answer, torch.Tensor) or answer.shape != right.shape or answer.is_complex():
        return False
    a64, r64 = answer.detach().to("cpu", torch.float64), right.detach().to("cpu", torch.float64)
    return bool(torch.isclose(a64, r64, rtol=rtol, atol=atol, equal_nan=True).all())


def _first_difference(answer: torch.Tensor, right: torch.Tensor) -> str:
    a64, r64 = answer.detach().to("cpu", torch.float64), right.detach().to("cpu", torch.float64)
    far = ~torch.isclose(a64, r64, rtol=1e-4, atol=1e-5, equal_nan=True)
    b, t, f = (int(i) for i in far.nonzero()[0])
    value, want = float(a64[b, t, f]), float(r64[b, t, f])
    text = (f"the values are wrong: sequence {b}, token {t}, feature {f} is {value:.4f}, the reference layer gives "
            f"{want:.4f}.")
    if math.isnan(value) or math.isinf(value):
        text += (" nan or inf in the output usually comes from a row of scores that is -inf everywhere (check which "
                 "scores your mask hides) or from exponentials that overflow (let torch.softmax do the softmax).")
    return text


class _ModuleExercise(FunctionExercise):
    """An exercise whose answer is an ``nn.Module`` class, checked against the course's ``MultiHeadAttention``."""

    def solution(self) -> None:
        if getattr(_core, "SOLUTIONS_WITHHELD", False):   # an instructor's copy: the parent prints why not
            return super().solution()
        print(f"A model answer for {self.title}:\n")
        print(self._solution_source())

    def _not_done(self) -> Feedback:
        return Feedback("not done", f"⏳ {self.title}: not done yet. Replace the lines `raise NotImplementedError` "
                                    f"with your code and run the cell again.{self._ask_for_hint()}")

    def _check(self, cls) -> Feedback:
        if not callable(cls):
            return self._wrong(f"expected your class, got {_describe(cls)}. Pass the class itself (its name, without "
                               f"brackets).")
        if isinstance(cls, type) and issubclass(cls, _READY_MADE):
            base = next(base for base in cls.__mro__ if base in _READY_MADE)
            return self._wrong(f"your class builds on {base.__name__}; the task asks you to write the layer "
                               f"yourself, from nn.Module.")
        generator = torch.Generator().manual_seed(self.seed)
        checked, weights_checks = [], []
        for layer in LAYERS:
            outcome = self._check_layer(cls, layer, generator)
            if isinstance(outcome, Feedback):
                return outcome
            checked.append(layer)
            weights_checks.append(outcome)
        for weights_check in weights_checks:   # return_weights=True last: every other mistake is named first
            outcome = weights_check()
            if isinstance(outcome, Feedback):
                return outcome
        return Feedback("correct", f"✅ {self.title}: your layer equals the course's MultiHeadAttention on all "
                                   f"{len(checked)} layers (1 to 6 heads, d_in != d_out, a single token, sharply "
                                   f"peaked scores), in eval() and with dropout in train(), its weights per head too.")

    # --- one layer ---------------------------------------------------------------------------
    def _build(self, cls, layer: _Layer):
        try:
            return cls(*layer.args, qkv_bias=layer.qkv_bias)
        except NotImplementedError:
            return self._not_done()
        except Exception as error:
            extra = ""
            if "before Module.__init__() call" in str(error):
                extra = " Call super().__init__() first in your __init__."
            return self._wrong(f"building {layer.description.split(' on a batch')[0]} raised "
                               f"{type(error).__name__}: {error}.{extra}")

    def _interface(self, module, layer: _Layer) -> str | None:
        if not isinstance(module, nn.Module):
            return f"your class built {_describe(module)}; it must be an nn.Module (class My...(nn.Module))."
        for sub in module.modules():
            if isinstance(sub, _READY_MADE):
                return (f"your layer uses the ready-made {type(sub).__name__}; the task asks you to write the "
                        f"layer yourself.")
        expected = {"W_query": (layer.d_in, layer.d_out, layer.qkv_bias), "W_key": (layer.d_in, layer.d_out,
                    layer.qkv_bias), "W_value": (layer.d_in, layer.d_out, layer.qkv_bias),
                    "out_proj": (layer.d_out, layer.d_out, True)}
        registered = {id(p) for p in module.parameters()}
        hidden = [name for name, value in vars(module).items() if isinstance(value, (list, tuple, dict))
                  and any(isinstance(v, nn.Module) for v in (value.values() if isinstance(value, dict) else value))]
        for name, (fan_in, fan_out, bias) in expected.items():
            part = getattr(module, name, None)
            if isinstance(part, torch.Tensor):
                return (f"`{name}` is a {'Parameter' if isinstance(part, nn.Parameter) else 'plain tensor'}: "
                        + ("" if isinstance(part, nn.Parameter) else "not registered as a parameter, so an "
                           "optimiser, .to(device) and state_dict never see it; and ")
                        + "the task asks for an nn.Linear, so the checker can copy the weights in.")
            if part is None and hidden:
                return (f"your layer has no attribute `{name}`, and its layers sit in a plain Python "
                        f"{type(vars(module)[hidden[0]]).__name__} (`{hidden[0]}`): layers there are not registered "
                        f"as parameters of your layer (module.parameters(), an optimiser, .to(device) and "
                        f"state_dict never see them). Assign each nn.Linear to its own attribute of self.")
            if part is None:
                return (f"your layer has no attribute `{name}`. The task asks for four nn.Linear layers named "
                        f"W_query, W_key, W_value and out_proj, so the checker can copy the weights in.")
            if not isinstance(part, nn.Linear):
                return (f"`{name}` is {_describe(part)}; the task asks for an nn.Linear, so the checker can copy "
                        f"the weights in.")
            if (part.in_features, part.out_features) != (fan_in, fan_out):
                return (f"for {layer.description.split(' on a batch')[0]}, `{name}` is nn.Linear({part.in_features}, "
                        f"{part.out_features}); it should map {fan_in} features to {fan_out}.")
            if (part.bias is not None) != bias:
                return (f"`{name}` {'has' if part.bias is not None else 'has no'} bias; "
                        + ("out_proj always has one." if name == "out_proj" else
                           "the query, key and value projections have one exactly when qkv_bias=True."))
            if any(id(p) not in registered for p in part.parameters()):
                return (f"the weights of `{name}` are not registered as parameters of your layer, so "
                        f"module.parameters() (and an optimiser, .to(device), state_dict) never sees them. Assign "
                        f"each nn.Linear to an attribute of self (a plain Python list hides it).")
        ours = {id(p) for name in PROJECTIONS for p in getattr(module, name).parameters()}
        extra = [name for name, p in module.named_parameters() if id(p) not in ours]
        if extra:
            return (f"your layer has parameters beyond the four projections ({', '.join(extra)}); the layer "
                    f"learns only W_query, W_key, W_value and out_proj.")
        return None

    def _run(self, module, x, namespace, coins: _Coins, seed: int, **kwargs):
        calls: list[str] = []
        with torch.random.fork_rng(devices=[]), _watching(_FORBIDDEN, namespace, calls), coins.flipping(namespace):
            torch.manual_seed(seed)
            out = module(x, **kwargs)
        return out, calls

    def _weights(self, module, reference, x, namespace, coins: _Coins, layer: _Layer, where: str) -> Feedback | None:
        """``forward(x, return_weights=True)`` in eval(): (the same context vectors, the weights per head)."""
        module.eval()
        reference.eval()
        shape = (layer.batch_size, layer.num_heads, layer.num_tokens, layer.num_tokens)
        call = "forward(x, return_weights=True)"
        try:
            with torch.no_grad():
                got, _ = self._run(module, x, namespace, coins, seed=4, return_weights=True)
                context, weights = reference(x, return_weights=True)
        except TypeError as error:
            if "return_weights" in str(error):
                return self._wrong("your forward takes no `return_weights`: the task asks for forward(self, x, "
                                   "return_weights=False), which with return_weights=True returns (context_vecs, "
                                   "attn_weights).")
            return self._wrong(f"{where}, {call} raised TypeError: {error}")
        except Exception as error:
            return self._wrong(f"{where}, {call} raised {type(error).__name__}: {error}")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return self._wrong(f"{where}, {call} returned {_describe(got)}; it must return two tensors, "
                               f"(context_vecs, attn_weights).")
        got_context, got_weights = got
        if _close(got_context, weights) and _close(got_weights, context):
            return self._wrong(f"{where}, {call} returns (attn_weights, context_vecs); the task asks for the "
                               f"context vectors first.")
        if not _close(got_context, context):
            return self._wrong(f"{where}, the first tensor {call} returns must be the context vectors, the same "
                               f"as forward(x) returns.")
        if not isinstance(got_weights, torch.Tensor):
            return self._wrong(f"{where}, {call} returns {_describe(got_weights)} as its weights; expected a tensor "
                               f"of shape {shape} = (batch_size, num_heads, num_tokens, num_tokens).")
        if layer.num_heads > 1 and _close(got_weights, weights.mean(dim=1)):
            return self._wrong(f"{where}, your weights are averaged over the heads, {tuple(got_weights.shape)} (as "
                               f"nn.MultiheadAttention does unless average_attn_weights=False). The task asks for "
                               f"every head's own rows, {shape}: the average blends what each head does.")
        if layer.num_heads > 1 and _close(got_weights, weights.transpose(1, 2)):
            return self._wrong(f"{where}, your weights come with the token axis before the head axis, "
                               f"{tuple(got_weights.shape)}; return them as the softmax made them, {shape} = "
                               f"(batch_size, num_heads, num_tokens, num_tokens).")
        if tuple(got_weights.shape) != shape:
            return self._wrong(f"{where}, your weights have shape {tuple(got_weights.shape)}, expected {shape} = "
                               f"(batch_size, num_heads, num_tokens, num_tokens).")
        if layer.num_tokens > 1 and _close(got_weights, weights.transpose(-2, -1)):
            return self._wrong(f"{where}, your weights are transposed: row i must be query i's weights for every "
                               f"key (it sums to 1), not key i's column.")
        sums = got_weights.detach().to("cpu", torch.float64).sum(dim=-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            return self._wrong(f"{where}, the rows of your weights do not sum to 1: return the weights after the "
                               f"softmax, not the scores before it.")
        if not _close(got_weights, weights):
            return self._wrong(f"{where}, your weights have the right shape but not the values the softmax gives "
                               f"(the reference layer's, head by head).")
        return None

    def _check_layer(self, cls, layer: _Layer, generator: torch.Generator) -> Feedback | Callable[[], Feedback | None]:
        """A Feedback if the layer's output is wrong, else the check of its weights, to run after every layer."""
        built = self._build(cls, layer)
        if isinstance(built, Feedback):
            return built
        module = built
        problem = self._interface(module, layer)
        if problem:
            return self._wrong(problem)
        torch.manual_seed(1000 + layer.d_in + layer.d_out + layer.num_heads)   # inside check(): a fork of the stream
        reference = MultiHeadAttention(*layer.args, qkv_bias=layer.qkv_bias)
        with torch.no_grad():
            for name in PROJECTIONS:
                getattr(module, name).weight.copy_(getattr(reference, name).weight)
                if getattr(reference, name).bias is not None:
                    getattr(module, name).bias.copy_(getattr(reference, name).bias)
        x = randn(generator, layer.batch_size, layer.num_tokens, layer.d_in, scale=layer.scale)
        forward = getattr(type(module), "forward", None)
        namespace = getattr(forward, "__globals__", {})
        coins = _Coins()
        where = f"on {layer.description}"

        # eval(): no dropout, the same output every call
        module.eval()
        reference.eval()
        try:
            with torch.no_grad():
                got, calls = self._run(module, x, namespace, coins, seed=1)
                eval_calls = list(coins.calls)
                again, _ = self._run(module, x, namespace, coins, seed=2)
        except NotImplementedError:
            return self._not_done()
        except Exception as error:
            return self._wrong(f"{where}, in eval(), your forward raised {type(error).__name__}: {error}")
        problem = self._output_kind(got, layer)
        if problem:
            return self._wrong(f"{where}, {problem}")
        if calls:
            return self._wrong(f"{where}, your forward calls `{calls[0]}`; the task asks you to write the scores, "
                               f"the mask, the softmax and the mixing yourself.")
        if any(training for _, _, training in eval_calls) or not _close(got, again):
            if any(training for _, _, training in eval_calls):
                return self._wrong(f"{where}, in eval() your dropout is still active. nn.Dropout follows the "
                                   f"layer's train()/eval() switch; F.dropout needs training=self.training.")
            return self._wrong(f"{where}, in eval() your output changes from one call to the next: something random "
                               f"is still active (a dropout of your own that ignores eval(), or a layer created "
                               f"inside forward, with new random weights on every call).")
        with torch.no_grad():
            expected = _forward(reference, x)
            if not _close(got, expected):
                for change, message in _MISTAKES:
                    if _close(got, _forward(reference, x, **change)):
                        return self._wrong(f"{where}: {message}")
                return self._wrong(f"{where}, {_first_difference(got, expected)}")

        # train(): dropout on the weights, the same coin flips as the reference; then the weights, in eval()
        if layer.dropout == 0.0:
            return lambda: self._weights(module, reference, x, namespace, coins, layer, where)
        module.train()
        reference.train()
        try:
            with torch.no_grad():
                got, _ = self._run(module, x, namespace, coins, seed=3)
        except Exception as error:
            return self._wrong(f"{where}, in train(), your forward raised {type(error).__name__}: {error}")
        learner_calls = list(coins.calls)
        with torch.no_grad(), coins.flipping({}):
            expected = reference(x)
        if _close(got, expected):
            return lambda: self._weights(module, reference, x, namespace, coins, layer, where)
        active = [(shape, p) for shape, p, training in learner_calls if training and p > 0]
        one_head = layer.batch_size * layer.num_tokens * layer.num_tokens
        if 1 < len(active) == layer.num_heads and all(math.prod(shape) == one_head for shape, _ in active):
            coins.per_head = True   # a loop over heads drops each weight once too: compare it coin for coin
            try:
                with torch.no_grad(), coins.flipping({}):
                    per_head = reference(x)
            finally:
                coins.per_head = False
            if _close(got, per_head):
                return lambda: self._weights(module, reference, x, namespace, coins, layer, where)
        if not active:
            return self._wrong(f"{where}, in train() your layer applies no dropout (through nn.Dropout or "
                               f"F.dropout): with dropout={layer.dropout}, train() must drop attention weights. "
                               f"The checker gives your nn.Dropout and the reference's the same coin flips; a "
                               f"dropout written by hand cannot be compared.")
        wrong_p = [p for _, p in active if not math.isclose(p, layer.dropout)]
        if wrong_p:
            return self._wrong(f"{where}, your dropout uses p={wrong_p[0]:g}, but the layer was built with "
                               f"dropout={layer.dropout}.")
        if len(active) > 1:
            return self._wrong(f"{where}, in train() your layer applies dropout {len(active)} times; the task asks "
                               f"for once, on the attention weights.")
        with torch.no_grad():
            for change, message in _DROPOUT_MISTAKES:
                with coins.flipping({}):
                    variant = _forward(reference, x, training=True, **change)
                if _close(got, variant):
                    return self._wrong(f"{where}: {message}")
        return self._wrong(f"{where}, in train() (dropout={layer.dropout}), "
                           + _first_difference(got, expected)
                           + " In eval() your layer was right: look at where and how you apply dropout.")

    @staticmethod
    def _output_kind(got, layer: _Layer) -> str | None:
        shape = (layer.batch_size, layer.num_tokens, layer.d_out)
        if isinstance(got, tuple):
            return (f"your forward returned a tuple of {len(got)}; it must return only the context vectors, one "
                    f"tensor of shape {shape}.")
        if not isinstance(got, torch.Tensor):
            return f"your forward returned {_describe(got)}; it must return one tensor of shape {shape}."
        if tuple(got.shape) != shape:
            return (f"your forward returned shape {tuple(got.shape)}, expected {shape} = (batch_size, num_tokens, "
                    f"d_out).")
        if got.is_complex() or not got.is_floating_point():
            return f"your forward returned dtype {got.dtype}, expected {torch.float32}."
        return None


causal_multi_head = _ModuleExercise(
    "Capstone: causal multi-head attention",
    "write class MyCausalMultiHeadAttention(nn.Module) with __init__(self, d_in, d_out, context_length, dropout, "
    "num_heads, qkv_bias=False) and forward(self, x, return_weights=False): x of shape (batch_size, num_tokens, "
    "d_in), num_tokens <= context_length, returns only the context vectors (batch_size, num_tokens, d_out); with "
    "return_weights=True it returns (context_vecs, attn_weights), the weights after the softmax per head, "
    "(batch_size, num_heads, num_tokens, num_tokens), compared in eval(). The checker gives your layer "
    "the course's weights and compares it with MultiHeadAttention on several sizes, in eval() and train(). Four "
    "nn.Linear attributes: W_query, W_key, W_value (d_in -> d_out, bias=qkv_bias) and out_proj (d_out -> d_out, "
    "with bias), and no other parameters; the causal mask may be a buffer of any name or be built in forward. "
    "Dropout: nn.Dropout(dropout) or F.dropout on the attention weights after the softmax, each weight dropped "
    "once (one call on all heads' weights, or one call per head), off in eval(); in train() the checker makes "
    "both layers drop the same weights. Not "
    "allowed: F.scaled_dot_product_attention, the course's "
    "scaled_dot_product_attention, MultiHeadAttention, MultiHeadAttentionWrapper, CausalAttention, "
    "nn.MultiheadAttention.",
    reference=MultiHeadAttention,
    cases=_cases,
    hint=["Write the shapes first, as comments, from x (B, T, d_in) to the output (B, T, d_out), then one line per "
          "arrow.",
          "Cutting d_out into heads: which axis of (B, T, d_out) holds one token's features, and where must the "
          "head axis end up for one matmul to handle every head at once?",
          "The mask: which entries of a (T, T) matrix are the future of query i? Build it once for context_length "
          "tokens and take the top-left (T, T) corner in forward.",
          "Merging is splitting backwards, step for step in reverse order.",
          "return_weights: which tensor already has the shape (B, H, T, T), and where in forward does it exist "
          "before the heads are merged?"],
    solution=_SolutionMultiHeadAttention,
    answer_name="MyCausalMultiHeadAttention",
    mistakes=[],
)


# --- 2. spot the bug: one fused projection for queries, keys and values --------------------------------------
def _fused_cases(g: torch.Generator) -> list[Case]:
    def case(num_heads, head_dim, d_in=5, num_tokens=6, scale=1.0):
        d_out = num_heads * head_dim
        text = f"batch 2, {num_tokens} tokens, d_in={d_in}, {num_heads} head{'s' if num_heads > 1 else ''} of {head_dim}"
        return Case(text + (f", inputs times {scale:g}" if scale != 1.0 else ""),
                    (randn(g, 2, num_tokens, d_in, scale=scale), randn(g, 3 * d_out, d_in, scale=0.5), num_heads))
    return [case(1, 4), case(2, 4), case(3, 2, d_in=8), case(4, 3, num_tokens=7), case(2, 3, scale=20.0)]


def _reference_fused(x, qkv_weight, num_heads):
    w_query, w_key, w_value = qkv_weight.chunk(3, dim=0)               # 3 x (d_out, d_in)
    queries, keys, values = (
        (x @ w.T).unflatten(-1, (num_heads, -1)).transpose(1, 2) for w in (w_query, w_key, w_value))  # (B, H, T, D)
    context, _ = scaled_dot_product_attention(queries, keys, values, mask=causal_mask(x.shape[1]))
    return context.transpose(1, 2).flatten(2)                            # (B, H, T, D) -> (B, T, d_out)


def buggy_fused_heads(x, qkv_weight, num_heads):
    batch_size, num_tokens, _ = x.shape
    d_out = qkv_weight.shape[0] // 3
    head_dim = d_out // num_heads
    qkv = x @ qkv_weight.T                                              # (B, T, d_in) -> (B, T, 3*d_out)
    qkv = qkv.view(batch_size, num_tokens, num_heads, 3, head_dim)      # (B, T, H, 3, D)
    queries, keys, values = qkv.permute(3, 0, 2, 1, 4)                  # 3 x (B, H, T, D)
    attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(head_dim)  # (B, H, T, T)
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_weights = torch.softmax(attn_scores.masked_fill(mask, float("-inf")), dim=-1)
    context = (attn_weights @ values).transpose(1, 2)                   # (B, H, T, D) -> (B, T, H, D)
    return context.reshape(batch_size, num_tokens, d_out)               # (B, T, d_out)


def _solution_fused_heads(x, qkv_weight, num_heads):
    batch_size, num_tokens, _ = x.shape
    d_out = qkv_weight.shape[0] // 3
    head_dim = d_out // num_heads
    qkv = x @ qkv_weight.T                                              # (B, T, d_in) -> (B, T, 3*d_out)
    qkv = qkv.view(batch_size, num_tokens, 3, num_heads, head_dim)      # (B, T, 3, H, D): q, k, v blocks first
    queries, keys, values = qkv.permute(2, 0, 3, 1, 4)                  # 3 x (B, H, T, D)
    attn_scores = queries @ keys.transpose(2, 3) / math.sqrt(head_dim)  # (B, H, T, T)
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_weights = torch.softmax(attn_scores.masked_fill(mask, float("-inf")), dim=-1)
    context = (attn_weights @ values).transpose(1, 2)                   # (B, H, T, D) -> (B, T, H, D)
    return context.reshape(batch_size, num_tokens, d_out)               # (B, T, d_out)


def _with_blocks(x, qkv_weight, num_heads, order):
    """The right computation, with the three (d_out, d_in) blocks of qkv_weight taken in ``order``."""
    blocks = qkv_weight.chunk(3, dim=0)
    return _reference_fused(x, torch.cat([blocks[i] for i in order]), num_heads)


def _queries_keys_swapped(x, qkv_weight, num_heads):
    return _with_blocks(x, qkv_weight, num_heads, (1, 0, 2))


def _keys_values_swapped(x, qkv_weight, num_heads):
    return _with_blocks(x, qkv_weight, num_heads, (0, 2, 1))


def _heads_interleaved(x, qkv_weight, num_heads):
    """Blocks right, but each block's features read as (D, H): head h gets features h, h + H, ..."""
    batch_size, num_tokens, _ = x.shape
    d_out = qkv_weight.shape[0] // 3
    qkv = (x @ qkv_weight.T).view(batch_size, num_tokens, 3, d_out // num_heads, num_heads)
    queries, keys, values = qkv.permute(2, 0, 4, 1, 3)                  # 3 x (B, H, T, D)
    context, _ = scaled_dot_product_attention(queries, keys, values, mask=causal_mask(num_tokens))
    return context.transpose(1, 2).reshape(batch_size, num_tokens, d_out)


fused_qkv_bug = SpotTheBug(
    "Spot the bug: queries, keys and values from one projection",
    "fused_heads(x, qkv_weight, num_heads) runs causal multi-head attention with ONE projection for queries, keys "
    "and values, as GPT-2's c_attn and nn.MultiheadAttention's in_proj_weight do. qkv_weight (3*d_out, d_in) is "
    "W_query.weight, W_key.weight and W_value.weight stacked in that order, so x @ qkv_weight.T holds all d_out "
    "query features, then all key features, then all value features; head h owns features h*head_dim to "
    "(h+1)*head_dim - 1 of each. Return the merged context vectors (batch_size, num_tokens, d_out), without "
    "out_proj. The code runs, every shape is right, and with one head it is even correct. Find the bug and fix it.",
    reference=_reference_fused,
    cases=_fused_cases,
    hint=["Probe it with two heads: the first d_out features of x @ qkv_weight.T are the queries, so head 1's "
          "first query feature is feature head_dim. Print it next to queries[:, 1, :, 0] inside the function: "
          "are they the same numbers?",
          "Write the 3*d_out features of one token as blocks: which features are queries, and which of them are "
          "head 1's? Then ask which features the view hands to head 1 as its query."],
    solution=_solution_fused_heads,
    buggy=buggy_fused_heads,
    bug_message="still wrong with two heads: what the code hands on as head 1's queries are not features head_dim "
                "to 2*head_dim - 1 of x @ qkv_weight.T. Find where it reads them from (.hint() nudges).",
    mistakes=[
        Mistake(_queries_keys_swapped,
                "your queries and keys are swapped: the weights of query i for key j are those of query j for key "
                "i, which the causal mask then cuts differently. The first d_out features are the queries."),
        Mistake(_keys_values_swapped,
                "your keys and values are swapped: the second block of d_out features holds the keys, the third "
                "the values."),
        Mistake(_heads_interleaved,
                "queries, keys and values are now read from the right blocks, but inside each block head h gets "
                "features h, h + H, h + 2H, ... instead of its own block h*head_dim to (h+1)*head_dim - 1."),
    ],
)
