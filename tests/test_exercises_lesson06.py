"""Notebook 06's exercises: the capstone (a causal multi-head attention class) and the fused-projection spot-the-bug.

Right answers written in several styles pass; each plausible wrong answer is rejected with its own message;
answers that produce inf or nan get a message, never a traceback."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.exercises import SpotTheBug, lesson06
from helpers.modules import MultiHeadAttention

capstone = lesson06.causal_multi_head
fused = lesson06.fused_qkv_bug


def test_the_notebook_offers_the_capstone_and_one_spot_the_bug():
    assert lesson06.__all__ == ["causal_multi_head", "fused_qkv_bug"]
    assert isinstance(fused, SpotTheBug) and not isinstance(capstone, SpotTheBug)


# --- the capstone: learner-style classes -------------------------------------------------------------------------
class Learner(nn.Module):
    """A right answer, one overridable method per step, so that each wrong answer below changes one step."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def scale(self):
        return self.head_dim ** 0.5

    def hide(self, n):
        return self.mask.bool()[:n, :n]

    def weights(self, scores, n):
        return torch.softmax(scores.masked_fill(self.hide(n), -torch.inf), dim=-1)

    def merge(self, context):
        b, _, n, _ = context.shape
        return context.transpose(1, 2).contiguous().view(b, n, self.d_out)

    def forward(self, x, return_weights=False):
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        w = self.dropout(self.weights(q @ k.transpose(-2, -1) / self.scale(), n))
        out = self.out_proj(self.merge(w @ v))
        return (out, self.returned(w)) if return_weights else out

    def returned(self, w):
        return w


class WithEinsum(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.h = num_heads
        self.W_query, self.W_key, self.W_value = (nn.Linear(d_in, d_out, bias=qkv_bias) for _ in range(3))
        self.out_proj = nn.Linear(d_out, d_out)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, return_weights=False):
        b, t, _ = x.shape
        q, k, v = (proj(x).reshape(b, t, self.h, -1) for proj in (self.W_query, self.W_key, self.W_value))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        probs = F.softmax(scores.masked_fill(future, float("-inf")), dim=3)
        context = torch.einsum("bhqk,bkhd->bqhd", self.drop(probs), v)
        out = self.out_proj(context.reshape(b, t, -1))
        if return_weights:
            return [out, probs]           # a list, and the weights before dropout: the same in eval()
        return out


class WithUnflattenAndFunctionalDropout(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.num_heads, self.p = num_heads, dropout
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("keep", torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))

    def forward(self, x, return_weights=False):
        t = x.shape[1]
        q = self.W_query(x).unflatten(-1, (self.num_heads, -1)).permute(0, 2, 1, 3)
        k = self.W_key(x).unflatten(-1, (self.num_heads, -1)).permute(0, 2, 1, 3)
        v = self.W_value(x).unflatten(-1, (self.num_heads, -1)).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k.mT) * q.size(-1) ** -0.5
        scores = torch.where(self.keep[:t, :t], scores, torch.tensor(float("-inf")))
        w = F.dropout(scores.softmax(-1), p=self.p, training=self.training)
        out = self.out_proj((w @ v).permute(0, 2, 1, 3).flatten(2))
        return (out, w) if return_weights else out


class WithHeadLoopAndCat(Learner):
    """Splits with slicing and merges with torch.cat, like the wrapper."""

    def split(self, t):
        return torch.stack([t[..., h * self.head_dim:(h + 1) * self.head_dim] for h in range(self.num_heads)], 1)

    def merge(self, context):
        return torch.cat([context[:, h] for h in range(self.num_heads)], dim=-1)


@pytest.mark.parametrize("right", [lesson06.causal_multi_head._solution, Learner, WithEinsum,
                                   WithUnflattenAndFunctionalDropout, WithHeadLoopAndCat])
def test_right_answers_in_several_styles_pass(right):
    feedback = capstone.check(right)
    assert feedback.passed, feedback.message


# --- the element the lesson does not show: forward(x, return_weights=True) -----------------------------------------
class NoReturnWeights(Learner):        # section 3's steps, copied: forward(x) only
    def forward(self, x):
        return super().forward(x)


class ReturnWeightsIgnored(Learner):
    def forward(self, x, return_weights=False):
        return super().forward(x)


class WeightsAveragedOverHeads(Learner):
    def returned(self, w):
        return w.mean(dim=1)


class WeightsTokensBeforeHeads(Learner):
    def returned(self, w):
        return w.transpose(1, 2)


class WeightsTransposed(Learner):
    def returned(self, w):
        return w.transpose(-2, -1)


class ScoresInsteadOfWeights(Learner):
    def returned(self, w):
        return torch.log(w)             # the scores up to a constant per row: -inf above the diagonal


class WeightsOfOneHead(Learner):
    def returned(self, w):
        return w[:, :1].expand_as(w)


class WeightsFirst(Learner):
    def forward(self, x, return_weights=False):
        out = super().forward(x, return_weights)
        return out[::-1] if return_weights else out




class ViewWithoutTranspose(Learner):
    def split(self, t):
        b, n, _ = t.shape
        return t.view(b, self.num_heads, n, self.head_dim)


class ScaleByDOut(Learner):
    def scale(self):
        return self.d_out ** 0.5


class ScaleByDIn(Learner):
    def scale(self):
        return self.W_query.in_features ** 0.5


class ScaleByHeadDimNoSqrt(Learner):
    def scale(self):
        return self.head_dim


class HidesItself(Learner):
    def hide(self, n):
        return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=0)


class SeesTheNextToken(Learner):
    def hide(self, n):
        return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=2)


class KeepMaskAsHideMask(Learner):   # notebook 04's keep-convention used as if True meant hide
    def hide(self, n):
        return torch.tril(torch.ones(n, n, dtype=torch.bool))


class TrilBelowDiagonal(Learner):
    def hide(self, n):
        return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)


class NoMask(Learner):
    def hide(self, n):
        return torch.zeros(n, n, dtype=torch.bool)


class MaskAfterSoftmax(Learner):
    def weights(self, scores, n):
        return torch.softmax(scores, dim=-1).masked_fill(self.hide(n), 0.0)


class SoftmaxOverQueries(Learner):
    def weights(self, scores, n):
        return torch.softmax(scores.masked_fill(self.hide(n), -torch.inf), dim=-2)


class SoftmaxOverHeads(Learner):
    def weights(self, scores, n):
        return torch.softmax(scores.masked_fill(self.hide(n), -torch.inf), dim=1)


class MergeWithoutTranspose(Learner):
    def merge(self, context):
        b, _, n, _ = context.shape
        return context.reshape(b, n, self.d_out)


class MergeHeadsLast(Learner):
    def merge(self, context):
        b, _, n, _ = context.shape
        return context.permute(0, 2, 3, 1).reshape(b, n, self.d_out)


class NoOutProj(Learner):
    def forward(self, x):
        self.out_proj(x.new_zeros(1, self.d_out))    # built and even called, but not on the heads
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        return self.merge(self.dropout(self.weights(q @ k.transpose(-2, -1) / self.scale(), n)) @ v)


@pytest.mark.parametrize("wrong, words", [
    (ViewWithoutTranspose, "heads are cut wrongly"),
    (ScaleByDOut, "square root of d_out"),
    (ScaleByDIn, "square root of d_in"),
    (ScaleByHeadDimNoSqrt, "divided by head_dim itself"),
    (HidesItself, "hides each token's own position"),
    (SeesTheNextToken, "still sees the next one"),
    (KeepMaskAsHideMask, "keeps only the future"),
    (TrilBelowDiagonal, "hides the tokens before each token"),
    (NoMask, "not causal"),
    (MaskAfterSoftmax, "no longer sum to 1"),
    (SoftmaxOverQueries, "over the queries"),
    (SoftmaxOverHeads, "head axis"),
    (MergeWithoutTranspose, "merged in the wrong order: reading (B, H, T, D) straight"),
    (MergeHeadsLast, "interleaves the heads"),
    (NoOutProj, "skips out_proj"),
    (NoReturnWeights, "takes no `return_weights`"),
    (ReturnWeightsIgnored, "must return two tensors"),
    (WeightsAveragedOverHeads, "averaged over the heads"),
    (WeightsTokensBeforeHeads, "token axis before the head axis"),
    (WeightsTransposed, "transposed"),
    (ScoresInsteadOfWeights, "do not sum to 1"),
    (WeightsOfOneHead, "not the values the softmax gives"),
    (WeightsFirst, "context vectors first"),
])
def test_each_common_mistake_gets_its_own_message(wrong, words):
    feedback = capstone.check(wrong)
    assert feedback.status == "wrong", feedback.message
    assert words in feedback.message, feedback.message


def test_the_messages_are_all_different():
    messages = [message for _, message in lesson06._MISTAKES + lesson06._DROPOUT_MISTAKES]
    assert len(set(messages)) == len(messages)


# --- the interface: registered nn.Linear layers the checker can fill ---------------------------------------------
class PlainTensors(Learner):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        del self.W_query
        self.W_query = torch.randn(d_out, d_in)          # a plain tensor: no parameter


class LinearsInAList(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.layers = [nn.Linear(d_in, d_out, bias=qkv_bias) for _ in range(3)] + [nn.Linear(d_out, d_out)]

    def forward(self, x):
        return x


class ExtraParameter(Learner):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.temperature = nn.Parameter(torch.ones(()))


class QkvBiasIgnored(Learner):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias=False)


class OutProjWithoutBias(Learner):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=False)


class HeadWidthProjections(Learner):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        self.W_query = nn.Linear(d_in, d_out // num_heads, bias=qkv_bias)


class ForgotSuperInit(Learner):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)


class FreshLayerInForward(Learner):
    def forward(self, x):
        return nn.Linear(self.d_out, self.d_out)(super().forward(x))


@pytest.mark.parametrize("wrong, words", [
    (PlainTensors, "not registered as a parameter"),
    (LinearsInAList, "not registered"),
    (ExtraParameter, "parameters beyond the four projections (temperature)"),
    (QkvBiasIgnored, "exactly when qkv_bias=True"),
    (OutProjWithoutBias, "out_proj always has one"),
    (HeadWidthProjections, "`W_query` is nn.Linear(3, 4)"),
    (ForgotSuperInit, "super().__init__()"),
    (FreshLayerInForward, "a layer created inside forward"),
])
def test_interface_problems_are_named(wrong, words):
    feedback = capstone.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_ready_made_attention_is_refused_by_name():
    class Subclass(MultiHeadAttention):
        pass

    assert "builds on MultiHeadAttention" in capstone.check(Subclass).message

    class WithSdpa(Learner):
        def weights(self, scores, n):
            raise AssertionError("not reached")

        def forward(self, x):
            q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
            context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_proj(self.merge(context))

    feedback = capstone.check(WithSdpa)
    assert "scaled_dot_product_attention" in feedback.message and "yourself" in feedback.message

    class Inside(Learner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.inner = nn.MultiheadAttention(self.d_out, self.num_heads)

    assert "ready-made MultiheadAttention" in capstone.check(Inside).message


# --- dropout: same coin flips in train(), nothing in eval() ---------------------------------------------------
class DropoutAlwaysOn(Learner):
    def weights(self, scores, n):
        return F.dropout(super().weights(scores, n), self.dropout.p, training=True)

    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        return self.out_proj(self.merge(self.weights(q @ k.transpose(-2, -1) / self.scale(), n) @ v))


class NoDropout(Learner):
    def forward(self, x):
        return super().forward(x) if not self.training else self.eval().forward(x)


class DropoutOnScores(Learner):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        scores = self.dropout(q @ k.transpose(-2, -1))
        return self.out_proj(self.merge(self.weights(scores / self.scale(), n) @ v))


class DropoutOnContext(Learner):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        return self.out_proj(self.merge(self.dropout(self.weights(q @ k.transpose(-2, -1) / self.scale(), n) @ v)))


class DropoutOnOutput(Learner):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        return self.dropout(self.out_proj(self.merge(self.weights(q @ k.transpose(-2, -1) / self.scale(), n) @ v)))


class FixedDropout(Learner):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout = nn.Dropout(0.5)


class TwiceDropout(Learner):
    def weights(self, scores, n):
        return self.dropout(super().weights(scores, n))


class HandWrittenDropout(Learner):
    def forward(self, x):
        n = x.shape[1]
        q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
        w = self.weights(q @ k.transpose(-2, -1) / self.scale(), n)
        if self.training and self.dropout.p > 0:
            w = w * (torch.rand_like(w) >= self.dropout.p) / (1 - self.dropout.p)
        return self.out_proj(self.merge(w @ v))


@pytest.mark.parametrize("wrong, words", [
    (DropoutAlwaysOn, "dropout is still active"),
    (NoDropout, "applies no dropout"),
    (DropoutOnScores, "acts on the scores"),
    (DropoutOnContext, "acts on the context vectors"),
    (DropoutOnOutput, "acts on the layer's output"),
    (FixedDropout, "p=0.5, but the layer was built with dropout=0.1"),
    (TwiceDropout, "applies dropout 2 times"),
    (HandWrittenDropout, "written by hand"),
])
def test_dropout_mistakes_are_named(wrong, words):
    feedback = capstone.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


from torch.nn.functional import dropout as my_dropout  # noqa: E402  (a learner's alias, global as in a notebook)


def test_dropout_applied_with_an_alias_of_functional_dropout_passes():
    class Alias(Learner):
        def forward(self, x, return_weights=False):
            n = x.shape[1]
            q, k, v = self.split(self.W_query(x)), self.split(self.W_key(x)), self.split(self.W_value(x))
            w = my_dropout(self.weights(q @ k.transpose(-2, -1) / self.scale(), n), self.dropout.p, self.training)
            out = self.out_proj(self.merge(w @ v))
            return (out, w) if return_weights else out

    assert capstone.check(Alias).passed


# --- answers with inf or nan, and odd answers -------------------------------------------------------------------
class NanEverywhere(Learner):
    def forward(self, x):
        return super().forward(x) * float("nan")


class InfAtOnePlace(Learner):
    def forward(self, x):
        out = super().forward(x).clone()
        out[0, -1, 0] = float("inf")
        return out


class NaiveSoftmax(Learner):      # exp without subtracting the maximum: overflows on peaked scores
    def weights(self, scores, n):
        e = scores.masked_fill(self.hide(n), -torch.inf).exp()
        return e / e.sum(-1, keepdim=True)


class ReturnsWeightsToo(Learner):
    def forward(self, x):
        return super().forward(x), None


@pytest.mark.parametrize("wrong, words", [
    (NanEverywhere, "is nan"),
    (InfAtOnePlace, "is inf"),
    (NaiveSoftmax, "sharply peaked"),
    (ReturnsWeightsToo, "returned a tuple of 2"),
])
def test_inf_nan_and_odd_answers_get_a_message(wrong, words):
    feedback = capstone.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_not_a_class_and_the_placeholder():
    assert "expected your class" in capstone.check(3).message

    class Placeholder(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            raise NotImplementedError

    class ForwardPlaceholder(Learner):
        def forward(self, x):
            raise NotImplementedError

    for unfinished in (Placeholder, ForwardPlaceholder):
        assert capstone.check(unfinished).status == "not done"


def test_model_answer_is_printed_under_the_task_name(capsys, monkeypatch):
    monkeypatch.setattr(capstone, "_answer_name", "")     # before a check has seen the learner's class
    capstone.solution()
    out = capsys.readouterr().out
    assert "class MyCausalMultiHeadAttention(nn.Module):" in out and "transpose(1, 2)" in out


def test_hints_do_not_give_the_code():
    for hint in capstone._hints + fused._hints:
        for code in ("view(", "transpose(", "triu", "tril", "softmax(", "math.sqrt", "permute"):
            assert code not in hint, (code, hint)


def test_the_diagnosis_variants_reproduce_the_reference():
    torch.manual_seed(0)
    layer = MultiHeadAttention(5, 8, 7, 0.0, 2, qkv_bias=True).eval()
    x = torch.randn(3, 7, 5)
    assert torch.allclose(lesson06._forward(layer, x), layer(x), atol=1e-6)


# --- spot the bug: queries, keys and values from one projection ------------------------------------------------
def test_the_buggy_fused_code_is_named_and_right_with_one_head():
    message = fused.check(fused.buggy).message
    assert "head 1's queries are not features head_dim" in message
    assert "axis of size 3" not in message and "(num_heads, 3, head_dim)" not in message   # it does not hand over the fix
    case = fused.cases(torch.Generator().manual_seed(0))[0]
    assert case.args[2] == 1 and torch.allclose(fused.buggy(*case.args), fused.reference(*case.args))


def _attend(q, k, v):
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf), -1) @ v


def test_fused_fixes_in_several_styles_pass():
    def with_split(x, qkv_weight, num_heads):
        b, t, _ = x.shape
        q, k, v = (x @ qkv_weight.T).split(qkv_weight.shape[0] // 3, dim=-1)
        q, k, v = (z.view(b, t, num_heads, -1).transpose(1, 2) for z in (q, k, v))
        return _attend(q, k, v).transpose(1, 2).reshape(b, t, -1)

    def with_sdpa(x, qkv_weight, num_heads):
        b, t, _ = x.shape
        qkv = F.linear(x, qkv_weight).unflatten(-1, (3, num_heads, -1)).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return context.transpose(1, 2).flatten(2)

    for right in (fused._solution, with_split, with_sdpa):
        feedback = fused.check(right)
        assert feedback.passed, feedback.message


def test_fused_wrong_fixes_are_named():
    def keys_first(x, qkv_weight, num_heads):
        b, t, _ = x.shape
        k, q, v = (x @ qkv_weight.T).view(b, t, 3, num_heads, -1).permute(2, 0, 3, 1, 4)
        return _attend(q, k, v).transpose(1, 2).reshape(b, t, -1)

    def interleaved(x, qkv_weight, num_heads):
        b, t, _ = x.shape
        q, k, v = (x @ qkv_weight.T).view(b, t, 3, -1, num_heads).permute(2, 0, 4, 1, 3)
        return _attend(q, k, v).transpose(1, 2).reshape(b, t, -1)

    def naive_softmax(x, qkv_weight, num_heads):
        b, t, _ = x.shape
        q, k, v = (x @ qkv_weight.T).view(b, t, 3, num_heads, -1).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        e = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf).exp()
        return ((e / e.sum(-1, keepdim=True)) @ v).transpose(1, 2).reshape(b, t, -1)

    def returns_inf(x, qkv_weight, num_heads):
        out = fused._solution(x, qkv_weight, num_heads).clone()
        out[..., 0] = -math.inf
        return out

    assert "queries and keys are swapped" in fused.check(keys_first).message
    assert "h + H" in fused.check(interleaved).message
    for wrong in (naive_softmax, returns_inf):
        feedback = fused.check(wrong)
        assert feedback.status == "wrong", feedback.message


# --- a loop over heads, one dropout call per head: each weight is dropped once, as the task says ---------------
class LoopOverHeads(nn.Module):
    """A learner's per-head loop: one slice of the projections per head, dropout once per head, a mask built in
    forward (no buffer called `mask`)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, return_weights=False):
        t = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        heads, per_head = [], []
        for h in range(self.num_heads):
            part = slice(h * self.head_dim, (h + 1) * self.head_dim)
            scores = q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(self.head_dim)   # (B, T, T)
            weights = self.dropout(torch.softmax(scores.masked_fill(future, -math.inf), dim=-1))
            heads.append(weights @ v[..., part])                                              # (B, T, D)
            per_head.append(weights)
        out = self.out_proj(torch.cat(heads, dim=-1))
        return (out, torch.stack(per_head, dim=1)) if return_weights else out                # (B, H, T, T)


class LoopOverHeadsDroppingTwice(LoopOverHeads):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        inner = self.dropout
        self.dropout = nn.Sequential(inner, nn.Dropout(inner.p))   # each weight meets dropout twice


def test_a_loop_over_heads_with_one_dropout_call_per_head_passes():
    feedback = capstone.check(LoopOverHeads)
    assert feedback.passed, feedback.message


def test_a_loop_over_heads_that_drops_each_weight_twice_is_wrong():
    feedback = capstone.check(LoopOverHeadsDroppingTwice)
    assert feedback.status == "wrong" and "times" in feedback.message, feedback.message


def test_the_capstone_task_says_how_often_dropout_runs_and_that_the_mask_needs_no_name():
    task = capstone.task
    assert "one call per head" in task and "buffer of any name" in task
    assert "return_weights=True" in task and "(batch_size, num_heads, num_tokens, num_tokens)" in task
