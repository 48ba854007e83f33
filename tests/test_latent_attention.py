"""Multi-head latent attention: the naive path, the absorbed path and cached decoding agree with an independent
implementation of DeepSeek-V2's equations, the cache holds d_c + d_R numbers per token, and wrong variants differ."""

import math

import pytest
import torch

from helpers.generation import kv_cache_bytes
from helpers.latent_attention import MultiHeadLatentAttention
from helpers.positions import apply_rope


def _mla(query_latent_dim=None, seed=0, **sizes):
    torch.manual_seed(seed)
    options = dict(d_in=24, d_out=20, context_length=16, dropout=0.0, num_heads=4, latent_dim=6, rope_dim=4,
                   head_dim=5)
    options.update(sizes)
    return MultiHeadLatentAttention(**options, query_latent_dim=query_latent_dim).eval()


def _reference(mla, x, rope_key=True, rope_on_content=False):
    """DeepSeek-V2's equations (Liu et al. 2024, section 2.1), written out head by head with einsum."""
    B, T, _ = x.shape
    H, D, R = mla.num_heads, mla.head_dim, mla.rope_dim
    pos = torch.arange(T)
    c_q = x if mla.W_DQ is None else torch.einsum("btd,cd->btc", x, mla.W_DQ.weight)
    q_c = torch.einsum("btc,ec->bte", c_q, mla.W_UQ.weight).view(B, T, H, D).permute(0, 2, 1, 3)
    q_r = apply_rope(torch.einsum("btc,ec->bte", c_q, mla.W_QR.weight).view(B, T, H, R).permute(0, 2, 1, 3), pos)
    c_kv = torch.einsum("btd,cd->btc", x, mla.W_DKV.weight)
    k_c = torch.einsum("btc,ec->bte", c_kv, mla.W_UK.weight).view(B, T, H, D).permute(0, 2, 1, 3)
    v = torch.einsum("btc,ec->bte", c_kv, mla.W_UV.weight).view(B, T, H, D).permute(0, 2, 1, 3)
    k_r = apply_rope(torch.einsum("btd,rd->btr", x, mla.W_KR.weight), pos)              # (B, T, R), one for all
    if rope_on_content:
        q_c, k_c = apply_rope(q_c, pos), apply_rope(k_c, pos) if D % 2 == 0 else k_c
    scores = torch.einsum("bhtd,bhsd->bhts", q_c, k_c)
    if rope_key:
        scores = scores + torch.einsum("bhtr,bsr->bhts", q_r, k_r)
    scores = scores / math.sqrt(D + R)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    context = torch.einsum("bhts,bhsd->bthd", scores.softmax(-1), v).reshape(B, T, H * D)
    return context @ mla.out_proj.weight.T + mla.out_proj.bias


def _decode(mla, x, absorbed, prompt=3):
    cache = mla.new_cache()
    parts = [mla(x[:, :prompt], cache=cache, absorbed=absorbed)]
    parts += [mla(x[:, t:t + 1], cache=cache, absorbed=absorbed) for t in range(prompt, x.shape[1])]
    return torch.cat(parts, dim=1), cache


@pytest.mark.parametrize("query_latent_dim", [None, 7])
def test_the_three_paths_equal_the_papers_equations(query_latent_dim):
    mla = _mla(query_latent_dim)
    x = torch.randn(2, 11, 24, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _reference(mla, x)
        naive, naive_weights = mla(x, return_weights=True)
        absorbed, absorbed_weights = mla(x, absorbed=True, return_weights=True)
        torch.testing.assert_close(naive, expected)
        torch.testing.assert_close(absorbed, expected)
        torch.testing.assert_close(absorbed_weights, naive_weights)
        for path in (False, True):
            decoded, cache = _decode(mla, x, absorbed=path)
            torch.testing.assert_close(decoded, expected)


def test_a_missing_rotary_key_or_rope_inside_the_content_would_be_caught():
    mla = _mla(head_dim=6)
    x = torch.randn(1, 9, 24, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        output = mla(x, absorbed=True)
        for wrong in (_reference(mla, x, rope_key=False), _reference(mla, x, rope_on_content=True)):
            assert not torch.allclose(output, wrong, atol=1e-4)


def test_wrong_absorptions_differ_from_the_naive_path():
    """Three ways to fold W_UK or W_UV wrongly, each built from the module's weights: none equals the naive path."""
    mla = _mla()
    x = torch.randn(2, 8, 24, generator=torch.Generator().manual_seed(3))
    pos = torch.arange(8)
    with torch.no_grad():
        naive = mla(x)
        q_c, q_r = mla.queries(x, pos)
        latents, rope_keys = mla.latents(x, pos)
        up_keys, up_values_out = mla.absorbed_weights()
        mask = torch.ones(8, 8, dtype=torch.bool).triu(1)

        def attend(latent_queries, scale, values_out, rope_queries=q_r):
            scores = (latent_queries @ latents.transpose(-2, -1) + rope_queries @ rope_keys.transpose(-2, -1)) / scale
            weights = scores.masked_fill(mask, float("-inf")).softmax(-1)
            return torch.einsum("bhtc,hco->bto", weights @ latents, values_out) + mla.out_proj.bias

        right_scale = math.sqrt(mla.head_dim + mla.rope_dim)
        torch.testing.assert_close(attend(q_c @ up_keys, right_scale, up_values_out), naive)   # the test can pass
        shared = up_keys.mean(0, keepdim=True).expand_as(up_keys)                             # one W_UK for all heads
        wrong = {
            "one W_UK shared by the heads": attend(q_c @ shared, right_scale, up_values_out),
            "scaled by the latent width": attend(q_c @ up_keys, math.sqrt(mla.latent_dim + mla.rope_dim),
                                                 up_values_out),
            "W_UV folded in the wrong order": attend(q_c @ up_keys, right_scale,
                                                     up_values_out.flip(0)),
            "rotary query left out": attend(q_c @ up_keys, right_scale, up_values_out, rope_queries=0 * q_r),
        }
        for name, output in wrong.items():
            assert not torch.allclose(output, naive, atol=1e-4), name


def test_the_cache_holds_d_c_plus_d_R_numbers_per_token_and_layer():
    mla = _mla(latent_dim=6, rope_dim=4)
    x = torch.randn(3, 10, 24, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, cache = _decode(mla, x, absorbed=True)
    assert cache.keys.shape == (3, 1, 10, 4) and cache.values.shape == (3, 1, 10, 6)
    assert cache.memory_bytes() == 3 * 10 * (6 + 4) * 4
    assert cache.memory_bytes() == kv_cache_bytes(1, latent_dim=6, rope_dim=4, num_tokens=10, batch_size=3,
                                                  dtype=torch.float32)
    expanded = 2 * 3 * 10 * mla.num_heads * mla.head_dim * 4                         # what MHA keys + values need
    assert expanded == kv_cache_bytes(1, mla.num_heads, mla.head_dim, 10, 4, 3)
    assert cache.memory_bytes() < expanded


def test_gradients_reach_every_projection():
    mla = _mla(7)
    mla(torch.randn(2, 5, 24), absorbed=True).sum().backward()
    for name, parameter in mla.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kwargs, match", [
    (dict(rope_dim=3), "rope_dim must be even"),
    (dict(latent_dim=0), "latent_dim must be at least 1"),
    (dict(head_dim=None, d_out=21), "d_out must be divisible"),
    (dict(dropout=1.0), "dropout"),
])
def test_bad_sizes_are_named(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _mla(**kwargs)


def test_bad_inputs_are_named():
    mla = _mla()
    with pytest.raises(ValueError, match="d_in=24"):
        mla(torch.randn(1, 3, 5))
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        mla(torch.randn(1, 3, 24), cache={})
    with pytest.raises(TypeError, match="absorbed must be a bool"):
        mla(torch.randn(1, 3, 24), absorbed=1)
    with pytest.raises(ValueError, match="exceed context_length=16"):
        mla(torch.randn(1, 17, 24))


class _NoRotaryKey(MultiHeadLatentAttention):
    """A wrong MLA: the shared rotary key is left out (what a from-scratch MLA without decoupled RoPE computes)."""

    def latents(self, x, positions):
        latents, rope_keys = super().latents(x, positions)
        return latents, torch.zeros_like(rope_keys)


class _TransposedValueFold(MultiHeadLatentAttention):
    """A wrong absorption: each head's latent context meets another head's folded W_UV W_o."""

    def absorbed_weights(self):
        up_keys, up_values_out = super().absorbed_weights()
        return up_keys, up_values_out.flip(0)


class _SharedKeyFold(MultiHeadLatentAttention):
    """A wrong absorption: one W_UK (the heads' mean) folded into every head's query."""

    def absorbed_weights(self):
        up_keys, up_values_out = super().absorbed_weights()
        return up_keys.mean(0, keepdim=True).expand_as(up_keys), up_values_out


@pytest.mark.parametrize("wrong_class, path", [(_NoRotaryKey, False), (_NoRotaryKey, True),
                                               (_TransposedValueFold, True), (_SharedKeyFold, True)])
def test_the_equality_checks_catch_wrong_variants(wrong_class, path):
    """Built from the same weights, each wrong variant fails the checks the right module passes."""
    right = _mla()
    wrong = wrong_class(**{k: getattr(right, k) for k in ("d_in", "d_out", "context_length", "num_heads",
                                                           "latent_dim", "rope_dim", "head_dim")}, dropout=0.0)
    wrong.load_state_dict(right.state_dict())
    x = torch.randn(2, 9, 24, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = _reference(right, x)
        torch.testing.assert_close(right(x, absorbed=path), expected)
        with pytest.raises(AssertionError):
            torch.testing.assert_close(wrong.eval()(x, absorbed=path), expected)


def test_the_mla_diagram_draws_its_sizes_and_rejects_bad_ones():
    import pytest
    from helpers.diagrams.latent_attention import mla_flow_diagram
    from helpers.plotting import figure_to_png
    fig = mla_flow_diagram(d_in=6, latent_dim=5, rope_dim=2, num_heads=2, head_dim=3)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "$d_c$ = 5" in texts and "$d_R$ = 2" in texts and "= 7" in texts and "2 heads shown" in texts
    assert figure_to_png(fig).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="latent_dim"):
        mla_flow_diagram(latent_dim=0)


def test_the_mla_diagram_keeps_the_shared_keys_wire_clear_of_every_label():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from helpers.diagrams.latent_attention import mla_flow_diagram
    for sizes in (dict(), dict(d_in=6, latent_dim=5, rope_dim=2, num_heads=2, head_dim=3)):
        fig = mla_flow_diagram(**sizes)
        ax = fig.axes[0]
        renderer = FigureCanvasAgg(fig).get_renderer()
        wire = next(line for line in ax.lines if line.get_color() == "#238b45")     # k^R_j to every head's key
        lowest = max(wire.get_ydata())                                               # y points down
        x0, x1 = min(wire.get_xdata()), max(wire.get_xdata())
        for text in ax.texts:
            corners = ax.transData.inverted().transform(text.get_window_extent(renderer).get_points())
            left, right = sorted(corners[:, 0])
            top = min(corners[:, 1])                                                 # the text's upper edge
            if text.get_text().startswith(("cached:", "hatched:")):
                assert top > lowest + 0.3, f"{text.get_text()!r} touches the k^R wire"
            elif right > x0 and left < x1 and top > lowest:                          # any other text below it
                assert top > lowest + 0.3, f"{text.get_text()!r} touches the k^R wire"
