"""Exercises for notebook 12: two layers, induction heads and attention sinks.

1. compute a head's prefix-matching score on any sequence (earlier occurrences anywhere, weights of any layer);
2. spot the bug: a layer-0 head mean-ablated in layer 1's keys alone (the mean taken over the wrong axis).
"""

from __future__ import annotations

import importlib

import torch

from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["prefix_score", "keys_ablated"]


def _softmax_rows(g: torch.Generator, num_heads: int, num_tokens: int, scale: float, causal: bool) -> torch.Tensor:
    scores = torch.randn(num_heads, num_tokens, num_tokens, generator=g) * scale
    if causal:
        scores = scores.masked_fill(torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1)  # (H, T, T)


# --- 1. the prefix-matching score of every head on one sequence ----------------------------------------------------
def _score_cases(g: torch.Generator) -> list[Case]:
    def case(description, ids, num_heads=2, scale=1.0, causal=True):
        token_ids = torch.tensor(ids)
        return Case(description, (_softmax_rows(g, num_heads, len(ids), scale, causal), token_ids))
    return [case("a pattern of 4 tokens repeated, then a new token (2 heads)", [0, 5, 9, 2, 7, 5, 9, 2, 7, 11]),
            case("a token that occurs three times, irregular gaps (3 heads)", [0, 3, 8, 3, 1, 6, 3, 8, 2, 1, 3], 3),
            case("the same token twice in a row (1 head)", [0, 4, 4, 7, 4, 4, 7], 1),
            case("sharply peaked weights (scores times 40, 2 heads)", [0, 2, 5, 1, 2, 5, 1, 9], 2, scale=40.0),
            case("weights of a layer that is not causal (every key visible, 2 heads)",
                 [0, 6, 1, 8, 6, 1, 8, 3, 6], 2, causal=False)]


def _reference_prefix_score(attn_weights, token_ids):
    from ..induction import prefix_matching_score
    return prefix_matching_score(attn_weights[None], token_ids[None])


def _solution_prefix_score(attn_weights, token_ids):
    num_tokens = token_ids.shape[0]
    before = torch.cat([torch.tensor([-1]), token_ids[:-1]])              # ids_{j-1} for every key j (none at 0)
    follows_match = before[None, :] == token_ids[:, None]                 # (T, T): ids_{j-1} == ids_i
    earlier = torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril()  # j <= i: the occurrence came before
    targets = follows_match & earlier                                      # (T, T)
    counted = targets.any(dim=-1)                                          # (T,): queries that have a match
    on_targets = (attn_weights * targets).sum(dim=-1)                      # (H, T)
    return on_targets[:, counted].mean(dim=-1)                             # (H,)


def _score_with(attn_weights, token_ids, targets, all_queries=False):
    counted = targets.any(dim=-1)
    on_targets = (attn_weights * targets).sum(dim=-1)
    if all_queries:
        return on_targets.mean(dim=-1)
    return on_targets[:, counted].mean(dim=-1) if bool(counted.any()) else torch.zeros(attn_weights.shape[0])


def _occurrence_itself(attn_weights, token_ids):      # the earlier occurrence, not the token after it
    num_tokens = token_ids.shape[0]
    same = (token_ids[None, :] == token_ids[:, None]) & torch.ones(num_tokens, num_tokens, dtype=torch.bool).tril(-1)
    return _score_with(attn_weights, token_ids, same)


def _every_query(attn_weights, token_ids):            # queries with nothing to match averaged in as zeros
    before = torch.cat([torch.tensor([-1]), token_ids[:-1]])
    targets = (before[None, :] == token_ids[:, None]) & torch.ones(len(token_ids), len(token_ids)).tril().bool()
    return _score_with(attn_weights, token_ids, targets, all_queries=True)


def _later_too(attn_weights, token_ids):              # no j <= i: later occurrences count as well
    before = torch.cat([torch.tensor([-1]), token_ids[:-1]])
    return _score_with(attn_weights, token_ids, before[None, :] == token_ids[:, None])


def _token_before(attn_weights, token_ids):           # shifted the wrong way: the token before the occurrence
    after = torch.cat([token_ids[1:], torch.tensor([-1])])
    targets = (after[None, :] == token_ids[:, None]) & torch.ones(len(token_ids), len(token_ids)).tril(-1).bool()
    return _score_with(attn_weights, token_ids, targets)


def _course_names(function: str) -> tuple[str, ...]:
    """``helpers.induction.<function>``, and ``helpers.<function>`` where the package re-exports it."""
    names = [f"helpers.induction.{function}"]
    if hasattr(importlib.import_module("helpers"), function):
        names.append(f"helpers.{function}")
    return tuple(names)


prefix_score = FunctionExercise(
    "The prefix-matching score",
    "write prefix_score(attn_weights, token_ids): attn_weights (H, T, T) are the weights of H heads on one sequence "
    "(rows = queries i, columns = keys j, each row sums to 1, from any layer, causal or not), token_ids (T,) its "
    "token ids. For each head, return the mean over the queries i that have a match of the weight query i puts on "
    "its matches: the keys j with 1 <= j <= i whose previous token ids_{j-1} equals ids_i (the tokens that followed "
    "an earlier occurrence of ids_i; with several matches, add their weights). A query with no match is left out "
    "of the mean. Return a tensor of shape (H,). Compute it yourself: do not call the course's "
    "prefix_matching_score.",
    reference=_reference_prefix_score,
    cases=_score_cases,
    hint=["Build a (T, T) True/False table first: is key j a match for query i? Two conditions make a match.",
          "ids_{j-1} for every j at once is the sequence shifted right by one place. Then compare it with ids_i for "
          "every i at once (broadcasting a column against a row)."],
    solution=_solution_prefix_score,
    mistakes=[
        Mistake(_occurrence_itself, "you score the weight on the earlier occurrence of ids_i itself. A prefix-matching "
                                    "head looks one step further: at the key j whose PREVIOUS token ids_{j-1} is ids_i "
                                    "(the token that came next last time)."),
        Mistake(_every_query, "you average over every query, also those whose token has no match: they pull the mean "
                              "towards 0. Leave them out of the mean."),
        Mistake(_later_too, "you count matches after the query too (j > i). Only earlier occurrences count: j <= i. "
                            "In a causal layer those weights are 0 anyway, which is why the difference shows only on "
                            "weights that are not causal."),
        Mistake(_token_before, "you compare ids_i with the token AFTER key j (ids_{j+1}); the score asks for the token "
                               "before it, ids_{j-1}: key j must be the token that followed ids_i."),
    ],
    rules=[forbids(*_course_names("prefix_matching_score"), why="Build the table of matches yourself.")],
    name="lesson12.prefix_score",
)


# --- 2. spot the bug: a layer-0 head removed from layer 1's keys alone ------------------------------------------------
def _ablation_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, tokens, d_model, head_dim):
        stream = torch.randn(batch, tokens, d_model, generator=g)
        head_output = torch.randn(batch, tokens, d_model, generator=g) * 2
        w_query, w_key = (torch.randn(d_model, head_dim, generator=g) / d_model ** 0.5 for _ in range(2))
        return Case(description, (stream, head_output, w_query, w_key))
    return [case("4 sequences of 6 tokens, d_model 8, head_dim 4", 4, 6, 8, 4),
            case("3 sequences of 5 tokens, d_model 6, head_dim 2", 3, 5, 6, 2),
            case("8 sequences of 32 tokens, d_model 64, head_dim 32 (notebook 12's model)", 8, 32, 64, 32)]


def _keys_weights(stream, key_stream, w_query, w_key):
    from ..attention import scaled_dot_product_attention
    from ..masks import causal_mask
    queries, keys = stream @ w_query, key_stream @ w_key   # (B, T, D)
    return scaled_dot_product_attention(queries, keys, keys, mask=causal_mask(stream.shape[1]), training=False)[1]


def _reference_keys_ablated(stream, head_output, W_query, W_key):
    ablated = stream - head_output + head_output.mean(dim=0, keepdim=True)
    return _keys_weights(stream, ablated, W_query, W_key)


def buggy_keys_ablated_weights(stream, head_output, W_query, W_key):
    # stream (B, T, d_model): X^(1), entering layer 1; head_output (B, T, d_model): what one layer-0 head added to it
    # W_query, W_key (d_model, D): one layer-1 head's projections (q = x W_q)
    mean_output = head_output.mean(dim=1, keepdim=True)                # the head's output, averaged
    ablated = stream - head_output + mean_output                       # its token-dependent part removed
    queries = stream @ W_query                                         # (B, T, D): queries read the whole stream
    keys = ablated @ W_key                                             # (B, T, D): keys read the ablated stream
    scores = queries @ keys.transpose(1, 2) / W_key.shape[1] ** 0.5    # (B, T, T)
    future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def _solution_keys_ablated_weights(stream, head_output, W_query, W_key):
    mean_output = head_output.mean(dim=0, keepdim=True)                # (1, T, d_model): over sequences, per position
    ablated = stream - head_output + mean_output
    queries = stream @ W_query
    keys = ablated @ W_key
    scores = queries @ keys.transpose(1, 2) / W_key.shape[1] ** 0.5
    future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def _queries_instead(stream, head_output, W_query, W_key):    # the head removed from the queries, not the keys
    ablated = stream - head_output + head_output.mean(dim=0, keepdim=True)
    return _keys_weights(ablated, stream, W_query, W_key)


def _both_sides(stream, head_output, W_query, W_key):          # removed from queries and keys
    ablated = stream - head_output + head_output.mean(dim=0, keepdim=True)
    return _keys_weights(ablated, ablated, W_query, W_key)


def _unscaled(stream, head_output, W_query, W_key):            # no 1 / sqrt(D)
    ablated = stream - head_output + head_output.mean(dim=0, keepdim=True)
    return _keys_weights(stream * W_key.shape[1] ** 0.5, ablated, W_query, W_key)


keys_ablated = SpotTheBug(
    "Spot the bug: a head removed from the keys alone",
    "keys_ablated_weights(stream, head_output, W_query, W_key) should return one layer-1 head's causal attention "
    "weights (B, T, T), softmax of q_i . k_j / sqrt(D) with the future hidden, when a layer-0 head is mean-ablated "
    "in the keys only: stream (B, T, d_model) is the stream X^(1) entering layer 1, head_output (B, T, d_model) "
    "what that layer-0 head added to it, W_query and W_key (d_model, D) the layer-1 head's projections (q = x "
    "W_query). The keys read the stream with head_output replaced by its mean over the B sequences at each "
    "position; the queries read the whole stream. The code below runs and returns the right shape, yet the "
    "weights are wrong. Find the bug and fix it.",
    reference=_reference_keys_ablated,
    cases=_ablation_cases,
    hint=["Mean-ablation keeps what the head writes on average at a position and removes what depends on the "
          "tokens. Which axis of head_output (B, T, d_model) runs over the sequences?",
          "Look at the shape of mean_output: it should be (1, T, d_model), one mean per position."],
    solution=_solution_keys_ablated_weights,
    buggy=buggy_keys_ablated_weights,
    bug_message="mean(dim=1) averages each sequence over its own positions: one vector per sequence, added to "
                "every key of that sequence, so it adds the same amount to every score of a row, which the softmax "
                "ignores. The answer is that of replacing the output by 0 (as is one mean over everything). "
                "Mean-ablation averages over the sequences at each position: mean(dim=0, keepdim=True), shape "
                "(1, T, d_model).",
    mistakes=[Mistake(_queries_instead, "you removed the head from the queries and left the keys whole; the task "
                                        "removes it from the keys only (queries read the whole stream)."),
              Mistake(_both_sides, "you removed the head from the queries too; only the keys read the ablated "
                                   "stream."),
              Mistake(_unscaled, "the scores are not divided by sqrt(D) (D = W_key.shape[1]).")],
    name="lesson12.keys_ablated",
)
