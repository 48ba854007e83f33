"""Exercises for notebook 12: two layers, induction heads and attention sinks.

1. compute a head's prefix-matching score on any sequence (earlier occurrences anywhere, weights of any layer);
2. spot the bug: a knock-out that silences the wrong numbers (a view without a transpose).
"""

from __future__ import annotations

import importlib

import torch

from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["prefix_score", "knock_out"]


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


# --- 2. spot the bug: knocking out one head --------------------------------------------------------------------------
def _knock_out_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, tokens, heads, head_dim, head):
        return Case(description, (torch.randn(batch, tokens, heads * head_dim, generator=g), head, heads))
    return [case("2 heads of width 4, 6 tokens, knock out head 1", 1, 6, 2, 4, 1),
            case("4 heads of width 3, 5 tokens, batch of 2, knock out head 0", 2, 5, 4, 3, 0),
            case("3 heads of width 2, 7 tokens, knock out head 1", 1, 7, 3, 2, 1),
            case("2 heads of width 32, 32 tokens (notebook 12's model), knock out head 0", 1, 32, 2, 32, 0)]


def _reference_knock_out(context_vecs, head, num_heads):
    head_dim = context_vecs.shape[-1] // num_heads
    silenced = context_vecs.clone()
    silenced[..., head * head_dim:(head + 1) * head_dim] = 0.0
    return silenced


def buggy_knock_out(context_vecs, head, num_heads):
    # context_vecs (B, T, H * D): every head's context vectors side by side, as they enter W_o (out_proj)
    batch_size, num_tokens, d_out = context_vecs.shape
    head_dim = d_out // num_heads
    per_head = context_vecs.clone().view(batch_size, num_heads, num_tokens, head_dim)   # (B, H, T, D)
    per_head[:, head] = 0.0                                                               # silence one head
    return per_head.view(batch_size, num_tokens, d_out)                                   # back to (B, T, H * D)


def _solution_knock_out(context_vecs, head, num_heads):
    batch_size, num_tokens, d_out = context_vecs.shape
    head_dim = d_out // num_heads
    per_head = context_vecs.clone().view(batch_size, num_tokens, num_heads, head_dim)   # (B, T, H, D): heads last
    per_head[:, :, head] = 0.0                                                            # every token, one head
    return per_head.view(batch_size, num_tokens, d_out)


def _tokens_axis(context_vecs, head, num_heads):      # the slice on the tokens axis instead of the features
    head_dim = context_vecs.shape[-1] // num_heads
    silenced = context_vecs.clone()
    silenced[:, head * head_dim:(head + 1) * head_dim] = 0.0
    return silenced


def _wrong_head(context_vecs, head, num_heads):       # every head but the chosen one
    head_dim = context_vecs.shape[-1] // num_heads
    kept = torch.zeros_like(context_vecs)
    kept[..., head * head_dim:(head + 1) * head_dim] = context_vecs[..., head * head_dim:(head + 1) * head_dim]
    return kept


knock_out = SpotTheBug(
    "Spot the bug: knocking out one head",
    "knock_out(context_vecs, head, num_heads) should silence one head: context_vecs (B, T, H * D) holds every "
    "head's context vectors side by side, as they enter W_o (head h in features h * D to (h + 1) * D - 1), and the "
    "answer is a copy with head `head`'s features set to 0 at every token, everything else unchanged. The code below "
    "runs and returns the right shape, yet it silences the wrong numbers. Find the bug and fix it.",
    reference=_reference_knock_out,
    cases=_knock_out_cases,
    hint=["Take B = 1, T = 3, H = 2, D = 1: six numbers. Write down which of them belong to head 1, then which "
          "ones the code sets to 0.",
          "In memory, (B, T, H * D) holds each token's H * D features one after another. Which numbers does "
          ".view(B, H, T, D) put together under one head index?"],
    solution=_solution_knock_out,
    buggy=buggy_knock_out,
    bug_message="view(B, H, T, D) on a (B, T, H * D) tensor does not split off the heads: the numbers in memory "
                "are token by token, so that view cuts the tokens into H groups, and `[:, head] = 0` silences a block "
                "of TOKENS (all their features), not one head. Split the features: view(B, T, H, D), then index the "
                "head axis (or slice features head * D to (head + 1) * D on the last axis).",
    mistakes=[Mistake(_tokens_axis, "you slice axis 1, the tokens: that silences tokens head * D to (head + 1) * D "
                                    "in every head. The head's D features are on the LAST axis: "
                                    "[..., head * D:(head + 1) * D]."),
              Mistake(_wrong_head, "you keep the chosen head and silence all the others; knocking out a head sets "
                                   "only that head's features to 0.")],
    name="lesson12.knock_out",
)
