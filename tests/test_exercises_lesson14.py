"""Notebook 14's exercises: right answers written differently pass, the real mistakes are named."""

import math

import torch

from helpers.exercises import lesson14
from helpers.generation import kv_cache_bytes
from helpers.recurrent import elu_feature_map, linear_attention


# --- exercise 1: the cache of a real configuration ---------------------------------------------------------------
def _kinds(config):
    if "layer_types" in config:
        return config["layer_types"]
    if "kv_lora_rank" in config:
        return ["full_attention"] * config["num_hidden_layers"]
    n, every = config["num_hidden_layers"], config["full_attention_interval"]
    return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]


def test_config_cache_bytes_accepts_other_right_forms():
    def by_counting_layers(config, num_tokens, batch_size, bytes_per_number):
        if "kv_lora_rank" in config:                          # MLA: one latent and one rotary key a token
            width = config["kv_lora_rank"] + config["qk_rope_head_dim"]
            return config["num_hidden_layers"] * width * num_tokens * batch_size * bytes_per_number
        kinds = _kinds(config)
        sliding, full = kinds.count("sliding_attention"), kinds.count("full_attention")
        window = config.get("sliding_window") or num_tokens
        tokens = full * num_tokens + sliding * min(window, num_tokens)
        return int(2 * config["num_key_value_heads"] * config["head_dim"] * bytes_per_number * tokens * batch_size)

    def with_torch(config, num_tokens, batch_size, bytes_per_number):
        if config.get("kv_lora_rank"):
            cache = torch.zeros(batch_size, num_tokens, config["kv_lora_rank"] + config["qk_rope_head_dim"])
            return config["num_hidden_layers"] * cache.numel() * bytes_per_number
        if "full_attention_interval" in config:               # count the attention layers: one per interval
            keep = torch.full((config["num_hidden_layers"] // config["full_attention_interval"],), num_tokens)
        else:
            keep = torch.tensor([min(num_tokens, config["sliding_window"]) if kind.startswith("sliding")
                                 else num_tokens for kind in config["layer_types"]])
        numbers = keep.sum() * 2 * config["num_key_value_heads"] * config["head_dim"] * batch_size
        return int(numbers) * bytes_per_number
    for answer in (by_counting_layers, with_torch):
        assert lesson14.config_cache_bytes.check(answer).passed, answer.__name__


def _plain(config, num_tokens, batch_size, bytes_per_number, head_dim=None, every_layer=False, window=True,
           full_window=False, bytes_override=None, from_zero=False):
    if "kv_lora_rank" in config:                                      # right on MLA: these mistakes are elsewhere
        return lesson14._solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)
    kinds = _kinds(config)
    if from_zero and "full_attention_interval" in config:
        every = config["full_attention_interval"]
        kinds = ["full_attention" if i % every == 0 else "linear_attention" for i in range(len(kinds))]
    head_dim = head_dim(config) if head_dim else config["head_dim"]
    size = bytes_override or bytes_per_number
    total = 0
    for kind in kinds:
        if kind == "linear_attention" and not every_layer:
            continue
        if kind == "sliding_attention" and window:
            total += config["sliding_window"] if full_window else min(num_tokens, config["sliding_window"])
        else:
            total += num_tokens
    return 2 * config["num_key_value_heads"] * head_dim * size * batch_size * total


def test_config_cache_bytes_names_each_mistake():
    check = lesson14.config_cache_bytes.check
    cases = {
        "read the config's head_dim": dict(head_dim=lambda c: c["hidden_size"] // c["num_attention_heads"]),
        "no KV cache": dict(every_layer=True),
        "closes each group": dict(from_zero=True),
        "sliding_window tokens (a rolling cache)": dict(window=False),
        "min(num_tokens": dict(full_window=True),
        "bytes_per_number": dict(bytes_override=2),
    }
    for phrase, options in cases.items():
        def answer(config, num_tokens, batch_size, bytes_per_number, options=options):
            return _plain(config, num_tokens, batch_size, bytes_per_number, **options)
        feedback = check(answer)
        assert feedback.status == "wrong" and phrase in feedback.message, (phrase, feedback.message)


def test_config_cache_bytes_names_each_latent_mistake():
    def latent(per_token):
        def answer(config, num_tokens, batch_size, bytes_per_number):
            if "kv_lora_rank" not in config:
                return lesson14._solution_config_bytes(config, num_tokens, batch_size, bytes_per_number)
            return config["num_hidden_layers"] * per_token(config) * num_tokens * batch_size * bytes_per_number
        return answer
    cases = {
        "per-head keys and values": lambda c: 2 * c["num_key_value_heads"] * c["hidden_size"] // c["num_attention_heads"],
        "twice": lambda c: 2 * (c["kv_lora_rank"] + c["qk_rope_head_dim"]),
        "left out the rotary key": lambda c: c["kv_lora_rank"],
    }
    for phrase, per_token in cases.items():
        feedback = lesson14.config_cache_bytes.check(latent(per_token))
        assert feedback.status == "wrong" and phrase in feedback.message and "MLA" in feedback.message, phrase


def test_config_cache_bytes_accepts_a_float_and_rejects_the_course_function():
    def as_float(config, num_tokens, batch_size, bytes_per_number):
        return float(lesson14._solution_config_bytes(config, num_tokens, batch_size, bytes_per_number))

    def via_course(config, num_tokens, batch_size, bytes_per_number):
        if "kv_lora_rank" in config:
            return kv_cache_bytes(config["num_hidden_layers"], num_tokens=num_tokens, bytes_per_value=bytes_per_number,
                                  batch_size=batch_size, latent_dim=config["kv_lora_rank"],
                                  rope_dim=config["qk_rope_head_dim"])
        kinds = [k for k in _kinds(config) if k != "linear_attention"]
        sliding = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
        return kv_cache_bytes(len(kinds), config["num_key_value_heads"], config["head_dim"], num_tokens,
                              bytes_per_number, batch_size, window_size=config.get("sliding_window") if sliding
                              else None, window_layers=sliding or None)
    assert lesson14.config_cache_bytes.check(as_float).passed
    feedback = lesson14.config_cache_bytes.check(via_course)
    assert feedback.status == "wrong" and "not to call" in feedback.message


def test_config_cache_bytes_states_its_rules_and_uses_the_published_fields():
    task = lesson14.config_cache_bytes.task
    assert "kv_cache_bytes" in task and "head_dim" in task and "full_attention_interval" in task
    assert "no KV cache" in task and "min" not in task
    gemma = lesson14.GEMMA_2_9B
    assert gemma["hidden_size"] // gemma["num_attention_heads"] == 224 != gemma["head_dim"]
    assert gemma["layer_types"][:3] == ["sliding_attention", "full_attention", "sliding_attention"]
    assert lesson14._reference_config_bytes(gemma, 8192, 1, 2) == 21 * 2 * 8 * 256 * 2 * (8192 + 4096)
    qwen = lesson14.QWEN3_NEXT_80B
    assert qwen["hidden_size"] // qwen["num_attention_heads"] == 128 != qwen["head_dim"]
    # 12 attention layers of 2 key/value heads of 256: 12 * 2 * 2 * 256 * 2 bytes = 24 KiB a token
    assert lesson14._reference_config_bytes(qwen, 1, 1, 2) == 24 * 1024
    # DeepSeek-V2: 60 MLA layers of 512 + 64 numbers, 2 bytes each: 69,120 bytes (67.5 KiB) a token
    v2 = lesson14.DEEPSEEK_V2
    assert "head_dim" not in v2 and "kv_lora_rank" in task
    assert lesson14._reference_config_bytes(v2, 1, 1, 2) == 60 * 576 * 2 == 69120


# --- exercise 2: linear attention one token at a time -----------------------------------------------------------------------------------
def test_linear_recurrence_accepts_other_right_forms():
    def with_einsum(queries, keys, values):
        phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
        state = torch.zeros(queries.shape[0], queries.shape[-1], values.shape[-1])
        normaliser = torch.zeros(queries.shape[0], queries.shape[-1])
        rows = []
        for t in range(queries.shape[1]):
            state += torch.einsum("bk,bv->bkv", phi_k[:, t], values[:, t])
            normaliser += phi_k[:, t]
            rows.append(torch.einsum("bk,bkv->bv", phi_q[:, t], state) /
                        torch.einsum("bk,bk->b", phi_q[:, t], normaliser)[:, None])
        return torch.stack(rows, 1)

    def extra_column(queries, keys, values):                  # the normaliser as a column of ones in the values
        ones = torch.ones(*values.shape[:-1], 1)
        augmented = torch.cat([values, ones], dim=-1)
        phi_q, phi_k = torch.nn.functional.elu(queries) + 1, torch.nn.functional.elu(keys) + 1
        state, rows = torch.zeros(queries.shape[0], queries.shape[-1], augmented.shape[-1]), []
        for t in range(queries.shape[1]):
            state = state + phi_k[:, t, :, None] * augmented[:, t, None, :]
            read = (phi_q[:, t, None, :] @ state)[:, 0]
            rows.append(read[:, :-1] / read[:, -1:])
        return torch.stack(rows, 1)
    for answer in (with_einsum, extra_column):
        assert lesson14.linear_recurrence.check(answer).passed, answer.__name__


def test_linear_recurrence_names_the_bug_and_the_near_misses():
    assert "never divided" in lesson14.linear_recurrence.check(lesson14.buggy_linear_recurrence).message
    assert "normaliser" not in lesson14.linear_recurrence.title.lower()        # the title does not name the bug
    assert "future" in lesson14.linear_recurrence.check(lesson14._whole_sequence_normaliser).message
    assert "plain average" in lesson14.linear_recurrence.check(lesson14._count_normaliser).message


def test_linear_recurrence_rejects_the_course_functions():
    def via_parallel(queries, keys, values):
        return linear_attention(queries, keys, values)[0]
    feedback = lesson14.linear_recurrence.check(via_parallel)
    assert feedback.status == "wrong" and "not to call" in feedback.message
    assert "linear_attention" in lesson14.linear_recurrence.task


def test_the_bug_is_a_weighted_sum_that_grows():
    queries = keys = torch.zeros(1, 5, 3)
    values = torch.ones(1, 5, 2)
    grown = lesson14.buggy_linear_recurrence(queries, keys, values)[0, :, 0]
    assert grown.tolist() == [3.0 * (t + 1) for t in range(5)]         # phi(0) = 1: weights 3 each, never divided
    assert math.isclose(float(linear_attention(queries, keys, values)[0][0, -1, 0]), 1.0)


def test_the_notebook_cell_ships_the_buggy_body_behind_a_placeholder():
    """Exercise 2's cell holds the buggy code after `raise NotImplementedError`: "not done" until the line goes."""
    import inspect
    import textwrap
    body = textwrap.dedent(inspect.getsource(lesson14.buggy_linear_recurrence)).split("\n", 1)[1]
    namespace = {"torch": torch, "elu_feature_map": elu_feature_map}
    exec("def shipped(queries, keys, values):\n    raise NotImplementedError\n" + body, namespace)
    assert lesson14.linear_recurrence.check(namespace["shipped"]).status == "not done"
    exec("def deleted(queries, keys, values):\n" + body, namespace)
    assert "never divided" in lesson14.linear_recurrence.check(namespace["deleted"]).message


def test_the_hybrid_rules_are_checked_on_a_layer_count_that_is_not_a_multiple():
    hybrid = {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 32,
              "num_hidden_layers": 7, "full_attention_interval": 3}
    assert lesson14._solution_config_bytes(hybrid, 100, 1, 1) == 2 * 2 * 3 * 32 * 100      # layers 2 and 5 only
    assert lesson14._from_layer_zero(hybrid, 100, 1, 1) == 3 * 2 * 3 * 32 * 100            # 0, 3, 6: one too many
