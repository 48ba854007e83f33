"""Notebook 14's exercises: right answers written differently pass, the real mistakes are named."""

import math

import torch

from helpers.exercises import lesson14
from helpers.generation import kv_cache_bytes
from helpers.recurrent import elu_feature_map, linear_attention


# --- exercise 1: the cache of a real configuration ---------------------------------------------------------------
def test_config_cache_bytes_accepts_other_right_forms():
    def by_counting_layers(config, num_tokens, batch_size):
        width = {"float32": 4}.get(config["torch_dtype"], 2)
        sliding = config["layer_types"].count("sliding_attention")
        full = config["num_hidden_layers"] - sliding
        window = config["sliding_window"] or num_tokens
        tokens = full * num_tokens + sliding * min(window, num_tokens)
        return int(2 * config["num_key_value_heads"] * config["head_dim"] * width * tokens * batch_size)

    def with_torch(config, num_tokens, batch_size):
        dtype = getattr(torch, config["torch_dtype"])
        keep = torch.tensor([min(num_tokens, config["sliding_window"]) if kind.startswith("sliding") else num_tokens
                             for kind in config["layer_types"]])
        numbers = keep.sum() * 2 * config["num_key_value_heads"] * config["head_dim"] * batch_size
        return int(numbers) * torch.empty((), dtype=dtype).element_size()
    for answer in (by_counting_layers, with_torch):
        assert lesson14.config_cache_bytes.check(answer).passed, answer.__name__


def test_config_cache_bytes_names_the_head_dim_trap_and_the_window():
    def derived(config, num_tokens, batch_size):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        return sum(2 * config["num_key_value_heads"] * head_dim * 2 * batch_size *
                   (min(num_tokens, config["sliding_window"]) if kind == "sliding_attention" else num_tokens)
                   for kind in config["layer_types"])

    def no_window(config, num_tokens, batch_size):
        return 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2 * \
            num_tokens * batch_size

    def always_the_window(config, num_tokens, batch_size):
        size = {"float32": 4}.get(config["torch_dtype"], 2)
        return sum(2 * config["num_key_value_heads"] * config["head_dim"] * size * batch_size *
                   (config["sliding_window"] if kind == "sliding_attention" else num_tokens)
                   for kind in config["layer_types"])
    assert "head_dim" in lesson14.config_cache_bytes.check(derived).message
    assert "sliding_window tokens" in lesson14.config_cache_bytes.check(no_window).message
    assert "min(num_tokens" in lesson14.config_cache_bytes.check(always_the_window).message


def test_config_cache_bytes_accepts_a_float_and_rejects_the_course_function():
    def as_float(config, num_tokens, batch_size):
        return float(lesson14._solution_config_bytes(config, num_tokens, batch_size))

    def via_course(config, num_tokens, batch_size):
        sliding = [i for i, kind in enumerate(config["layer_types"]) if kind == "sliding_attention"]
        return kv_cache_bytes(config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"],
                              num_tokens, {"float32": 4}.get(config["torch_dtype"], 2), batch_size,
                              window_size=config["sliding_window"] if sliding else None,
                              window_layers=sliding or None)
    assert lesson14.config_cache_bytes.check(as_float).passed                 # 2113929216.0 is the right number
    feedback = lesson14.config_cache_bytes.check(via_course)
    assert feedback.status == "wrong" and "not to call" in feedback.message


def test_config_cache_bytes_states_its_rules_and_uses_the_published_gemma_fields():
    task = lesson14.config_cache_bytes.task
    assert "kv_cache_bytes" in task and "head_dim" in task and "min" not in task
    gemma = lesson14.GEMMA_2_9B
    assert gemma["hidden_size"] // gemma["num_attention_heads"] == 224 != gemma["head_dim"]
    assert gemma["layer_types"][:3] == ["sliding_attention", "full_attention", "sliding_attention"]
    assert lesson14._reference_config_bytes(gemma, 8192, 1) == 21 * 2 * 8 * 256 * 2 * (8192 + 4096)


# --- exercise 2: the normaliser -----------------------------------------------------------------------------------
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
    assert "normaliser" in lesson14.linear_recurrence.check(lesson14.buggy_linear_recurrence).message
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
