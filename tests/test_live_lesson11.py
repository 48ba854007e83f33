"""Notebook 11's pictures: every control changes the picture, and the picture shows the numbers it claims."""

import numpy as np
import pytest
import torch

from helpers.diagrams.kv_cache import kv_cache_step_diagram
from helpers.generation import LETTERS, TinyCausalLM, generate, kv_cache_bytes
from helpers.live.lesson11 import generation_stepper, gqa_explorer, masks_figure
from helpers.masks import causal_mask
from helpers.plotting import figure_to_png


@pytest.fixture(scope="module")
def cached_run():
    torch.manual_seed(0)
    model = TinyCausalLM(10, 16, d_model=32, num_heads=4).eval()
    return generate(model, torch.tensor([[1, 2, 3, 4]]), 12)


def test_stepper_shows_each_steps_weights_and_cache(cached_run):
    view = generation_stepper(cached_run, LETTERS, step=0)
    pictures = {bytes(view.image.value)}
    for step in (3, 11):
        view.controls["step"].value = step
        shown = np.asarray(view.fig.axes[0].images[0].get_array())
        num_keys = 4 + step
        torch.testing.assert_close(torch.as_tensor(shown[:, :num_keys]), cached_run.weights[step][0])
        assert np.isnan(shown[:, num_keys:]).all()          # keys that do not exist yet stay blank
        labels = [t for t in view.fig.axes[0].texts if t.get_text() == "not cached yet"]
        assert len(labels) == 1 and labels[0].get_visible() == (num_keys < 15)   # labelled while any is blank
        assert f"Step {step}:" in view.fig.axes[0].get_title() and f"{num_keys} keys" in view.fig.axes[0].get_title()
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 3, "every step must change the picture"
    assert repr(view) == "LiveFigure(step=11)"


def test_stepper_needs_a_cached_run(cached_run):
    torch.manual_seed(0)
    model = TinyCausalLM(10, 16).eval()
    with pytest.raises(ValueError, match="use_cache=True"):
        generation_stepper(generate(model, torch.tensor([[1, 2]]), 3, use_cache=False), LETTERS)


def test_gqa_explorer_maps_heads_and_highlights_the_chosen_size():
    view = gqa_explorer("Llama 3 8B", 32, 32, 128, 4096, 8192, num_kv_heads=8)
    assert "1.00 GiB" in view.fig.axes[1].get_title()
    assert any("real: $H_{kv}$ = 8" in text.get_text() for text in view.fig.axes[1].texts)
    assert list(view.controls["num_kv_heads"].options) == [1, 2, 4, 8, 16, 32]
    pictures = {bytes(view.image.value)}
    for kv_heads in (1, 32):
        view.controls["num_kv_heads"].value = kv_heads
        row = np.asarray(view.fig.axes[0].images[0].get_array())[0]
        assert row.tolist() == [(h // (32 // kv_heads)) % 10 for h in range(32)]   # query head h -> h // G
        gib = kv_cache_bytes(32, kv_heads, 128, 8192) / 2**30
        assert f"{gib:.2f} GiB" in view.fig.axes[1].get_title()
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 3
    with pytest.raises(ValueError, match="must divide"):
        gqa_explorer("x", 1, 8, 4, 32, 16, num_kv_heads=3)


def test_masks_figure_has_a_key_for_hidden_and_seen():
    fig = masks_figure({"causal": causal_mask(4)})
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["hidden (True)", "seen (False)"]
    shown = np.asarray(fig.axes[0].images[0].get_array())
    assert shown.tolist() == causal_mask(4).float().tolist()


def test_masks_figure_fills_a_grid_row_by_row():
    masks = {f"causal, T = {n}": causal_mask(n) for n in (2, 3, 4)}
    fig = masks_figure(masks, ncols=2)   # 2 x 2 grid, the last cell left empty
    assert [ax.get_title() for ax in fig.axes] == list(masks)
    (x0, y0), (x1, y1), (x2, y2) = [ax.get_position().p0 for ax in fig.axes]
    assert y0 == y1 > y2 and x0 == x2 < x1   # row by row: two on top, the third below the first
    shown = np.asarray(fig.axes[2].images[0].get_array())
    assert shown.tolist() == causal_mask(4).float().tolist()
    for bad in (0, 4, True, 1.5):
        with pytest.raises(ValueError, match="ncols must be"):
            masks_figure(masks, ncols=bad)


def test_static_figures_render():
    assert figure_to_png(masks_figure({"causal": causal_mask(4)})).startswith(b"\x89PNG")
    assert figure_to_png(kv_cache_step_diagram(3, 2, 2)).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="num_cached must be a positive int"):
        kv_cache_step_diagram(0)
