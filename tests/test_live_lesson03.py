"""Notebook 03's pictures: the training slider shows the recorded snapshots, and the Q/K/V diagram has true shapes."""

from __future__ import annotations

import pytest
import torch
from matplotlib.patches import Rectangle

import helpers
from helpers.diagrams.qkv_flow import qkv_flow_diagram
from helpers.live.lesson03 import training_explorer, weights_side_by_side
from helpers.plotting import figure_to_png


@pytest.fixture(scope="module")
def task():
    return helpers.PreviousTokenTask()


@pytest.fixture(scope="module")
def run(task):
    """The run notebook 03 trains (same arguments)."""
    return helpers.train_attention(task, helpers.SelfAttention_v2, num_steps=200, lr=0.02, seed=123,
                                   snapshot_every=5)


def test_slider_shows_the_snapshot_of_its_step(run, task):
    view = training_explorer(run)
    assert view.controls["step"].max == run.steps[-1] and view.controls["step"].step == 5
    first_png = bytes(view.image.value)
    for step in (30, 60):
        view.controls["step"].value = step
        shown = torch.as_tensor(view.heatmap.image.get_array())  # what the heatmap displays now
        torch.testing.assert_close(shown, run.snapshots[run.steps.index(step)])
        assert f"after {step} steps" in view.heatmap.ax.get_title()
        assert list(view.step_line.get_xdata()) == [step, step]
        assert bytes(view.image.value) != first_png
    view.controls["step"].value = 45
    assert bytes(view.image.value) == first_png  # back to the start: the very same picture


def test_explorer_opens_at_a_telling_step_with_a_visible_marker(run):
    view = training_explorer(run)
    assert view.controls["step"].value == 45                     # half-way: the stripe is forming
    torch.testing.assert_close(torch.as_tensor(view.heatmap.image.get_array()), run.snapshots[run.steps.index(45)])
    assert list(view.step_line.get_xdata()) == [45, 45]          # not hidden on the y-axis at step 0
    labels = {line.get_label() for ax in view.fig.axes for line in ax.get_lines()}
    assert {"step shown", "1.0 = all weight on target"} <= labels
    weight_ax = [ax for ax in view.fig.axes if ax.get_ylabel() == "mean weight on the correct token"]
    assert len(weight_ax) == 1 and weight_ax[0].get_ylim()[1] < 1.2  # the weight has its own 0..1 axis
    with pytest.raises(ValueError, match="recorded steps"):
        training_explorer(run, step=3)


def test_the_numbers_the_lesson_prints_for_steps_30_and_60(run, task):
    # The lesson asks the learner to predict these, then prints them from run.snapshots.
    on_target = {step: helpers.weight_on_target(run.snapshots[run.steps.index(step)], task.target_positions())
                 for step in (30, 60)}
    assert [round(w, 2) for w in on_target[30].tolist()] == [0.92, 0.90, 0.00, 0.03, 0.01, 0.01]
    assert (on_target[60] > 0.8).all()


def test_curves_have_labelled_axes(run):
    view = training_explorer(run)
    curve_ax = view.fig.axes[1]
    assert curve_ax.get_xlabel() and curve_ax.get_ylabel()
    heat_ax = view.heatmap.ax
    assert heat_ax.get_xlabel() == "key token" and heat_ax.get_ylabel() == "query token"


def test_training_explorer_rejects_other_input():
    with pytest.raises(TypeError, match="TrainingRun"):
        training_explorer(torch.zeros(3))


def test_side_by_side_uses_one_fixed_scale(run):
    fig = weights_side_by_side(run.snapshots[0], run.snapshots[-1], run.probe_labels, ("before", "after"))
    heatmap_axes = [ax for ax in fig.axes if ax.images]
    assert len(heatmap_axes) == 2
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in heatmap_axes)
    assert [ax.get_title() for ax in heatmap_axes] == ["before", "after"]
    with pytest.raises(ValueError, match="two strings"):
        weights_side_by_side(run.snapshots[0], run.snapshots[-1], run.probe_labels, ("only one",))


@pytest.mark.parametrize("num_tokens, d_in, d_out, d_v", [(6, 3, 2, None), (6, 3, 2, 4), (4, 5, 3, 1)])
def test_qkv_diagram_draws_one_cell_per_number(num_tokens, d_in, d_out, d_v):
    fig = qkv_flow_diagram(num_tokens, d_in, d_out, d_v)
    d_v = d_out if d_v is None else d_v
    cells = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    expected = (num_tokens * d_in                    # X
                + 2 * d_in * d_out + d_in * d_v      # W_q, W_k, W_v
                + 2 * num_tokens * d_out + num_tokens * d_v  # Q, K, V
                + 2 * num_tokens * num_tokens        # S, A
                + num_tokens * d_v)                  # Z
    assert len(cells) == expected
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"X", "Q", "K", "V", "S", "A", "Z", f"({num_tokens}, {num_tokens})", f"({num_tokens}, {d_v})"} <= texts
    assert fig.get_figwidth() <= 12.0
    assert figure_to_png(fig)[:8] == b"\x89PNG\r\n\x1a\n"


def test_qkv_diagram_title_states_the_sizes():
    texts = {t.get_text() for t in qkv_flow_diagram(6, 3, 2, 4).axes[0].texts}
    assert any("$T$ = 6" in t and "$d_v$ = 4" in t for t in texts)
    assert not any("Self-attention" in t.get_text() for t in qkv_flow_diagram(title=None).axes[0].texts)


@pytest.mark.parametrize("kwargs, error", [({"num_tokens": 0}, ValueError), ({"d_in": 2.5}, TypeError),
                                           ({"d_v": 40}, ValueError), ({"d_out": True}, TypeError)])
def test_qkv_diagram_rejects_bad_sizes(kwargs, error):
    with pytest.raises(error):
        qkv_flow_diagram(**kwargs)


def test_training_on_a_device_argument_keeps_cpu_numbers(task):
    # device="cpu" given explicitly is the default path: the same numbers, snapshots on the CPU.
    default = helpers.train_attention(task, num_steps=20, seed=1)
    explicit = helpers.train_attention(task, num_steps=20, seed=1, device="cpu")
    assert default.losses == explicit.losses
    assert explicit.snapshots.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_training_on_the_gpu_learns_the_same_pattern(task):
    cpu_run = helpers.train_attention(task, num_steps=200, seed=123)
    gpu_run = helpers.train_attention(task, num_steps=200, seed=123, device="cuda")
    assert gpu_run.snapshots.device.type == "cpu"
    torch.testing.assert_close(gpu_run.snapshots[0], cpu_run.snapshots[0], atol=1e-4, rtol=0)
    assert round(gpu_run.target_weights[-1], 2) == round(cpu_run.target_weights[-1], 2) == 1.0
