"""Exercises for notebook 14: attention in today's large models.

1. a real configuration's cache size from its config.json fields: a head_dim that is not d_model / H, a pattern
   of sliding-window layers, and a hybrid whose linear-attention layers keep no cache (Qwen3-Next's
   full_attention_interval, a field the lesson never used), and multi-head latent attention (DeepSeek-V2's
   kv_lora_rank and qk_rope_head_dim);
2. spot the bug: linear attention one token at a time.
"""

from __future__ import annotations

import torch

from ..generation import kv_cache_bytes
from ..recurrent import elu_feature_map, linear_attention
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["config_cache_bytes", "linear_recurrence"]

# google/gemma-2-9b's config.json: the fields that size the cache (Gemma Team 2024; the file is reference 10 of the
# notebook). The file has no per-layer list: layer_types spells out the paper's alternation (section 2), a local
# sliding window on layers 0, 2, 4, ... and global attention on layers 1, 3, 5, ...
GEMMA_2_9B = {"hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
              "num_hidden_layers": 42, "sliding_window": 4096,
              "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(42)]}

# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: the fields that size the cache. Its layers are Gated DeltaNet
# (linear attention, a fixed state, no KV cache) except every full_attention_interval-th one, layers 3, 7, 11, ...
QWEN3_NEXT_80B = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                  "num_hidden_layers": 48, "full_attention_interval": 4}

# DeepSeek-V2 under its config.json's field names, with the sizes of its paper (Liu et al. 2024, section 3.1.2: 60
# layers, hidden size 5120, 128 heads, d_c = 512, d_R = 64; reference 1 of the notebook). Every layer is MLA: it
# caches the latent c_j (kv_lora_rank numbers) and the shared rotary key k^R_j (qk_rope_head_dim numbers) a token.
# The file has no head_dim: a per-head count would have to derive one.
DEEPSEEK_V2 = {"hidden_size": 5120, "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 60,
               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


def _is_latent(config) -> bool:
    return "kv_lora_rank" in config


def _attention_layers(config) -> list[str]:
    """The kind of every layer: 'sliding_attention', 'full_attention' or 'linear_attention'."""
    if "layer_types" in config:
        return list(config["layer_types"])
    if "full_attention_interval" not in config:            # MLA: every layer attends to every token
        return ["full_attention"] * config["num_hidden_layers"]
    interval = config["full_attention_interval"]
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(config["num_hidden_layers"])]


# --- 1. the cache of a real configuration -------------------------------------------------------------------------
def _config_cases(g: torch.Generator) -> list[Case]:
    five_to_one = {"hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                   "num_hidden_layers": 7, "sliding_window": 512,
                   "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(7)]}
    small_hybrid = {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 32,
                    "num_hidden_layers": 7, "full_attention_interval": 3}           # attention on layers 2 and 5
    small_latent = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3,
                    "kv_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16}
    return [Case("Gemma 2 9B, 8,192 tokens, batch 1, 2 bytes a number", (GEMMA_2_9B, 8192, 1, 2)),
            Case("Gemma 2 9B, 1,000 tokens (shorter than the window), batch 4, 2 bytes", (GEMMA_2_9B, 1000, 4, 2)),
            Case("Qwen3-Next-80B-A3B, 32,768 tokens, batch 2, 2 bytes", (QWEN3_NEXT_80B, 32768, 2, 2)),
            Case("a made-up model with five sliding layers to one global, 3,000 tokens, batch 3, 4 bytes (fp32)",
                 (five_to_one, 3000, 3, 4)),
            Case("a made-up hybrid of 7 layers with full_attention_interval 3, 100 tokens, batch 1, 1 byte (fp8)",
                 (small_hybrid, 100, 1, 1)),
            Case("DeepSeek-V2 (MLA), 4,096 tokens, batch 2, 2 bytes", (DEEPSEEK_V2, 4096, 2, 2)),
            Case("a made-up MLA model of 3 layers, kv_lora_rank 24, qk_rope_head_dim 8, 50 tokens, batch 3, 4 bytes",
                 (small_latent, 50, 3, 4))]


def _reference_config_bytes(config, num_tokens, batch_size, bytes_per_number):
    if _is_latent(config):
        return kv_cache_bytes(config["num_hidden_layers"], num_tokens=num_tokens, bytes_per_value=bytes_per_number,
                              batch_size=batch_size, latent_dim=config["kv_lora_rank"],
                              rope_dim=config["qk_rope_head_dim"])
    kinds = _attention_layers(config)
    cached = [kind for kind in kinds if kind != "linear_attention"]       # linear layers keep a state, no cache
    windowed = [i for i, kind in enumerate(cached) if kind == "sliding_attention"]
    return kv_cache_bytes(len(cached), config["num_key_value_heads"], config["head_dim"], num_tokens,
                          bytes_per_number, batch_size, window_size=config["sliding_window"] if windowed else None,
                          window_layers=windowed if windowed else None)


def _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number):
    if "kv_lora_rank" in config:               # MLA: c_j and k^R_j a token in every layer, shared by all heads
        per_token = (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * bytes_per_number
        return config["num_hidden_layers"] * num_tokens * per_token * batch_size
    if "layer_types" in config:
        kinds = config["layer_types"]
    else:                                      # a hybrid: every full_attention_interval-th layer is attention
        interval = config["full_attention_interval"]
        kinds = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                 for i in range(config["num_hidden_layers"])]
    per_token = 2 * config["num_key_value_heads"] * config["head_dim"] * bytes_per_number   # a key and a value
    total = 0
    for kind in kinds:
        if kind == "sliding_attention":
            total += min(num_tokens, config["sliding_window"]) * per_token
        elif kind == "full_attention":
            total += num_tokens * per_token
    return total * batch_size                  # linear_attention layers add nothing: a fixed state, no cache


def _with(config, **changes):
    return {**config, **changes}


def _derived_head_dim(config, num_tokens, batch_size, bytes_per_number):
    return _solution_config_bytes(_with(config, head_dim=config["hidden_size"] // config["num_attention_heads"]),
                                  num_tokens, batch_size, bytes_per_number)


def _query_heads(config, num_tokens, batch_size, bytes_per_number):
    return _solution_config_bytes(_with(config, num_key_value_heads=config["num_attention_heads"]),
                                  num_tokens, batch_size, bytes_per_number)


def _no_windows(config, num_tokens, batch_size, bytes_per_number):
    kinds = ["full_attention" if kind == "sliding_attention" else kind for kind in _attention_layers(config)]
    return _solution_config_bytes(_with(config, layer_types=kinds), num_tokens, batch_size, bytes_per_number)


def _always_full_window(config, num_tokens, batch_size, bytes_per_number):
    if _is_latent(config):
        return _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)
    per_layer = 2 * config["num_key_value_heads"] * config["head_dim"] * bytes_per_number
    return batch_size * per_layer * sum(config["sliding_window"] if kind == "sliding_attention" else num_tokens
                                        for kind in _attention_layers(config) if kind != "linear_attention")


def _every_layer_cached(config, num_tokens, batch_size, bytes_per_number):
    kinds = ["full_attention" if kind == "linear_attention" else kind for kind in _attention_layers(config)]
    return _solution_config_bytes(_with(config, layer_types=kinds), num_tokens, batch_size, bytes_per_number)


def _from_layer_zero(config, num_tokens, batch_size, bytes_per_number):
    if "full_attention_interval" not in config:
        return _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)
    interval = config["full_attention_interval"]                      # layers 0, interval, 2 interval, ...
    kinds = ["full_attention" if i % interval == 0 else "linear_attention" for i in range(config["num_hidden_layers"])]
    return _solution_config_bytes(_with(config, layer_types=kinds), num_tokens, batch_size, bytes_per_number)


def _latent_as_heads(config, num_tokens, batch_size, bytes_per_number):
    if not _is_latent(config):
        return _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)
    plain = {key: value for key, value in config.items() if key not in ("kv_lora_rank", "qk_rope_head_dim")}
    plain["layer_types"] = ["full_attention"] * config["num_hidden_layers"]
    return _derived_head_dim(plain, num_tokens, batch_size, bytes_per_number)


def _latent_twice(config, num_tokens, batch_size, bytes_per_number):
    return (2 if _is_latent(config) else 1) * _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)


def _latent_without_rope(config, num_tokens, batch_size, bytes_per_number):
    if not _is_latent(config):
        return _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)
    return _solution_config_bytes({**config, "qk_rope_head_dim": 0}, num_tokens, batch_size, bytes_per_number)


def _keys_only(config, num_tokens, batch_size, bytes_per_number):
    return _solution_config_bytes(config, num_tokens, batch_size, bytes_per_number) // 2


def _always_two_bytes(config, num_tokens, batch_size, bytes_per_number):
    return _solution_config_bytes(config, num_tokens, batch_size, 2)


config_cache_bytes = FunctionExercise(
    "The cache of a real configuration",
    "write cache_bytes(config, num_tokens, batch_size, bytes_per_number): the bytes of the KV cache of a whole "
    "model holding batch_size sequences of num_tokens tokens, each number stored in bytes_per_number bytes, from "
    "the fields of its config.json given as a dict: num_hidden_layers, num_attention_heads, num_key_value_heads, "
    "hidden_size, head_dim, and either layer_types (one entry per layer, 'sliding_attention' or 'full_attention', "
    "with sliding_window) or full_attention_interval (a hybrid: layers interval - 1, 2 interval - 1, ... are full "
    "attention, every other layer is linear attention), or, for multi-head latent attention, kv_lora_rank and "
    "qk_rope_head_dim (every layer caches one latent of kv_lora_rank numbers and one rotary key of "
    "qk_rope_head_dim numbers a token, shared by all heads). A sliding layer keeps at most sliding_window tokens, a "
    "full layer keeps them all, a linear-attention layer keeps a fixed-size state and no KV cache (leave it out). "
    "Return the number of bytes, computed yourself: without the course's kv_cache_bytes.",
    reference=_reference_config_bytes,
    cases=_config_cases,
    hint=["Per layer and token, what does the cache hold? Which of the config's fields tell you how wide a key is?",
          "Make a list of the layers' kinds first. For full_attention_interval = 4 and 8 layers it is linear, "
          "linear, linear, full, linear, linear, linear, full.",
          "A sliding layer holds min(num_tokens, sliding_window) tokens: with 1,000 tokens and a window of 4,096 "
          "it holds 1,000.",
          "A config with kv_lora_rank is MLA: per layer and token it caches kv_lora_rank + qk_rope_head_dim "
          "numbers, whatever the number of heads (notebook 14, section 2)."],
    solution=_solution_config_bytes,
    mistakes=[
        Mistake(_latent_as_heads, "for the MLA model you counted per-head keys and values: an MLA layer caches "
                                  "only the latent (kv_lora_rank numbers) and the shared rotary key "
                                  "(qk_rope_head_dim numbers) a token; the heads' keys and values are rebuilt."),
        Mistake(_latent_twice, "for the MLA model you counted the latent and rotary key twice, as if a key and a "
                               "value: c_j serves as both, so a token costs kv_lora_rank + qk_rope_head_dim "
                               "numbers a layer, once."),
        Mistake(_latent_without_rope, "for the MLA model you left out the rotary key: the cache holds k^R_j "
                                      "(qk_rope_head_dim numbers) beside the latent c_j."),
        Mistake(_derived_head_dim, "you derived the head width as hidden_size / num_attention_heads. Many models "
                                   "set head_dim on its own: read the config's head_dim."),
        Mistake(_query_heads, "you counted num_attention_heads key/value heads: only num_key_value_heads heads "
                              "are cached (grouped-query attention, notebook 11)."),
        Mistake(_every_layer_cached, "you gave every layer of the hybrid a cache: only every "
                                     "full_attention_interval-th layer is attention; the linear-attention layers "
                                     "keep a fixed state and no KV cache."),
        Mistake(_from_layer_zero, "you took layers 0, interval, 2 interval, ... as the attention layers: the "
                                  "attention layer closes each group (layers interval - 1, 2 interval - 1, ...), "
                                  "which changes the count when the number of layers is not a multiple of it."),
        Mistake(_no_windows, "every layer keeps every token in your answer: the 'sliding_attention' layers keep "
                             "at most sliding_window tokens (a rolling cache)."),
        Mistake(_always_full_window, "your sliding layers always hold sliding_window tokens, even when the "
                                     "sequence is shorter: they hold min(num_tokens, sliding_window)."),
        Mistake(_always_two_bytes, "your answer assumes 2 bytes a number: use bytes_per_number."),
        Mistake(_keys_only, "your answer is half the right one: the cache holds a key AND a value per head."),
    ],
    rules=[forbids("helpers.generation.kv_cache_bytes", "helpers.kv_cache_bytes",
                   why="The task asks you to compute the bytes from the fields yourself.")],
)


# --- 2. spot the bug: linear attention one token at a time ----------------------------------------------------------
def _recurrence_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, num_tokens, d_k, d_v, scale=1.0):
        return Case(description, (scale * torch.randn(batch, num_tokens, d_k, generator=g),
                                  scale * torch.randn(batch, num_tokens, d_k, generator=g),
                                  torch.randn(batch, num_tokens, d_v, generator=g)))
    return [case("6 tokens, d_k = d_v = 4", 1, 6, 4, 4),
            case("9 tokens, batch of 2, d_k = 8, d_v = 3", 2, 9, 8, 3),
            case("1 token", 1, 1, 5, 5),
            case("12 tokens with large queries and keys (times 6)", 2, 12, 4, 6, scale=6.0)]


def _reference_recurrence(queries, keys, values):
    return linear_attention(queries, keys, values)[0]


def buggy_linear_recurrence(queries, keys, values):
    # queries, keys (B, T, d_k); values (B, T, d_v); phi = elu_feature_map
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
    state = torch.zeros(queries.shape[0], queries.shape[2], values.shape[2])   # S: (B, d_k, d_v)
    outputs = []
    for t in range(queries.shape[1]):
        state = state + phi_k[:, t, :, None] * values[:, t, None, :]        # S_t = S_{t-1} + phi(k_t)^T v_t
        outputs.append((phi_q[:, t, None, :] @ state)[:, 0, :])             # phi(q_t) S_t: (B, d_v)
    return torch.stack(outputs, dim=1)                                        # (B, T, d_v)


def _solution_recurrence(queries, keys, values):
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
    state = torch.zeros(queries.shape[0], queries.shape[2], values.shape[2])   # S: (B, d_k, d_v)
    normaliser = torch.zeros(queries.shape[0], queries.shape[2])               # n: (B, d_k)
    outputs = []
    for t in range(queries.shape[1]):
        state = state + phi_k[:, t, :, None] * values[:, t, None, :]        # S_t = S_{t-1} + phi(k_t)^T v_t
        normaliser = normaliser + phi_k[:, t]                                 # n_t = n_{t-1} + phi(k_t)
        read = (phi_q[:, t, None, :] @ state)[:, 0, :]                       # phi(q_t) S_t: (B, d_v)
        outputs.append(read / (phi_q[:, t] * normaliser).sum(-1, keepdim=True))
    return torch.stack(outputs, dim=1)                                        # (B, T, d_v)


def _whole_sequence_normaliser(queries, keys, values):
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
    unnormalised = buggy_linear_recurrence(queries, keys, values)
    return unnormalised / (phi_q * phi_k.sum(dim=1, keepdim=True)).sum(-1, keepdim=True)


def _normaliser_without_query(queries, keys, values):
    normaliser = elu_feature_map(keys).cumsum(dim=1).sum(-1, keepdim=True)    # sum of n_t, no phi(q_t)
    return buggy_linear_recurrence(queries, keys, values) / normaliser


def _count_normaliser(queries, keys, values):
    counts = torch.arange(1, queries.shape[1] + 1, dtype=queries.dtype)[None, :, None]
    return buggy_linear_recurrence(queries, keys, values) / counts


linear_recurrence = SpotTheBug(
    "Spot the bug: linear attention one token at a time",
    "linear_recurrence(queries, keys, values) should return the causal linear attention (B, T, d_v) of "
    "Katharopoulos et al. (2020) with phi = elu_feature_map, one token at a time with a running state: queries and "
    "keys (B, T, d_k), values (B, T, d_v). Its output at t must equal the parallel form's "
    "sum_{j <= t} (phi(q_t) . phi(k_j)) v_j / sum_{j <= t} phi(q_t) . phi(k_j). The code runs, but its answer is "
    "wrong. Find the bug and fix it, keeping the recurrence: elu_feature_map may be used, the course's "
    "linear_attention, linear_attention_recurrent and associative_recall may not.",
    reference=_reference_recurrence,
    cases=_recurrence_cases,
    hint=["Feed it values that are all 1: a weighted average of ones is 1. What does the buggy code return?",
          "The parallel form divides by a sum that grows with t too. Which running quantity would give it?"],
    solution=_solution_recurrence,
    buggy=buggy_linear_recurrence,
    bug_message="the output is phi(q_t) S_t alone: a weighted SUM of the values whose weights phi(q_t) . phi(k_j) "
                "are never divided by their total, so it grows with t. Keep a second running sum, "
                "n_t = n_{t-1} + phi(k_t) (d_k numbers), and divide phi(q_t) S_t by phi(q_t) . n_t.",
    mistakes=[
        Mistake(_whole_sequence_normaliser, "you divide by a normaliser summed over the whole sequence, future "
                                            "keys included: at step t only the keys 0..t may count."),
        Mistake(_normaliser_without_query, "your normaliser sums phi(k_j) without the query: the weights are "
                                           "phi(q_t) . phi(k_j), so divide by phi(q_t) . n_t."),
        Mistake(_count_normaliser, "you divide by the number of tokens: that is a plain average, but the weights "
                                   "phi(q_t) . phi(k_j) differ from key to key; divide by their sum."),
    ],
    rules=[forbids("helpers.recurrent.linear_attention", "helpers.linear_attention",
                   "helpers.recurrent.linear_attention_recurrent", "helpers.linear_attention_recurrent",
                   "helpers.recurrent.associative_recall", "helpers.associative_recall",
                   why="The task asks you to fix the recurrence itself.")],
)
