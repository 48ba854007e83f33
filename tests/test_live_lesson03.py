"""Notebook 03's pictures and measurements: the training slider shows the recorded snapshots, the Q/K/V diagram has
true shapes, the initialisation tables print what the lesson says, and the lesson's own classes are the ones in
``helpers``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from matplotlib.patches import Rectangle
from torch import nn

import helpers
from helpers.diagrams.qkv_flow import qkv_flow_diagram
from helpers.live import lesson03 as lesson03_live
from helpers.live.lesson03 import (LABEL_WIDTH, init_side_by_side, init_stats, init_table, reverse_all_dims,
                                   first_step_reaching, saturation, train_inits, trained_tables,
                                   training_explorer, weights_side_by_side)
from helpers.source import source_excerpt
from helpers.plotting import figure_to_png

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "03_trainable_qkv.ipynb"


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
    for step in (30, 45):
        view.controls["step"].value = step
        shown = torch.as_tensor(view.heatmap.image.get_array())  # what the heatmap displays now
        torch.testing.assert_close(shown, run.snapshots[run.steps.index(step)])
        assert f"after {step} steps" in view.heatmap.ax.get_title()
        assert list(view.step_line.get_xdata()) == [step, step]
        assert bytes(view.image.value) != first_png
    view.controls["step"].value = 60
    assert bytes(view.image.value) == first_png  # back to the start: the very same picture


def test_explorer_opens_at_the_step_the_lesson_discusses_with_a_visible_marker(run, task):
    view = training_explorer(run)
    assert view.controls["step"].value == 60                     # the numbers printed just above it
    shown = torch.as_tensor(view.heatmap.image.get_array())
    torch.testing.assert_close(shown, run.snapshots[run.steps.index(60)])
    # "By step 60 every row's favourite is its target key": the stored picture shows the stripe
    assert torch.equal(shown.argmax(dim=-1), task.target_positions())
    assert list(view.step_line.get_xdata()) == [60, 60]          # not hidden on the y-axis at step 0
    labels = {line.get_label() for ax in view.fig.axes for line in ax.get_lines()}
    assert {"step shown", "1.0 = all weight on target"} <= labels
    weight_ax = [ax for ax in view.fig.axes if ax.get_ylabel() == "mean weight on the target key"]
    assert len(weight_ax) == 1 and weight_ax[0].get_ylim()[1] < 1.2  # the weight has its own 0..1 axis
    with pytest.raises(ValueError, match="recorded steps"):
        training_explorer(run, step=3)


def test_the_numbers_the_lesson_prints_for_steps_30_and_60(run, task):
    # The lesson asks the learner to predict these, then prints them from run.snapshots.
    on_target = {step: helpers.weight_on_target(run.snapshots[run.steps.index(step)], task.target_positions())
                 for step in (30, 60)}
    assert [round(w, 2) for w in on_target[30].tolist()] == [0.92, 0.90, 0.00, 0.03, 0.01, 0.01]
    assert round(run.target_weights[30], 1) == 0.3                # "after 30 steps ... about 0.3"
    assert (on_target[60] > 0.8).all()


def test_first_step_reaching_is_the_first_snapshot_at_the_level_row_by_row(run, task):
    first_half = first_step_reaching(run, task, 0.5)
    assert first_half == [5, 5, 60, 40, 55, 45]                  # the lesson: rows 3, 5, 4, then 2
    on_target = helpers.weight_on_target(run.snapshots, task.target_positions())   # (snapshots, 6)
    for row, step in enumerate(first_half):                      # the same as a loop over the snapshots
        index = run.steps.index(step)
        assert on_target[index, row] >= 0.5 and (on_target[:index, row] < 0.5).all()
    assert first_step_reaching(run, task, 1.01) == [None] * 6   # a level no row reaches
    with pytest.raises(TypeError, match="TrainingRun"):
        first_step_reaching(run.snapshots, task)
    with pytest.raises(TypeError, match="PreviousTokenTask"):
        first_step_reaching(run, None)


def test_curves_have_labelled_axes(run):
    view = training_explorer(run)
    curve_ax = view.fig.axes[1]
    assert curve_ax.get_xlabel() and curve_ax.get_ylabel()
    heat_ax = view.heatmap.ax
    assert heat_ax.get_xlabel() == "key token" and heat_ax.get_ylabel() == "query token"


def test_training_explorer_rejects_other_input():
    with pytest.raises(TypeError, match="TrainingRun"):
        training_explorer(torch.zeros(3))


def test_side_by_side_uses_one_fixed_scale_and_one_colour_bar(run):
    fig = weights_side_by_side(run.snapshots[0], run.snapshots[-1], run.probe_labels, ("before", "after"))
    heatmap_axes = [ax for ax in fig.axes if ax.images]
    assert len(heatmap_axes) == 2 and len(fig.axes) == 3      # two heatmaps and one shared colour bar
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in heatmap_axes)
    assert [ax.get_title() for ax in heatmap_axes] == ["before", "after"]
    colour_bar = next(ax for ax in fig.axes if not ax.images)
    fig.canvas.draw()
    assert colour_bar.get_position().x0 > heatmap_axes[1].get_position().x1  # on the right of both panels
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
    assert {"X", "Q", "K", "V", "S", "A", "Z", f"({num_tokens}, {num_tokens})\nscores",
            f"({num_tokens}, {num_tokens})\nattention weights", f"({num_tokens}, {d_v})\ncontext vectors"} <= texts
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


# --- the lesson's own classes are helpers' classes --------------------------------------------------------------
def _notebook_classes():
    """Run the notebook cells that define SelfAttention_v1 and SelfAttention_v2 (class definitions only)."""
    cells = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    namespace = {"math": math, "torch": torch, "nn": nn}
    for name in ("SelfAttention_v1", "SelfAttention_v2"):
        source = next(c for c in cells if c.startswith(f"class {name}("))
        exec(source.split("\n\n\n")[0], namespace)  # the class, without the lines that use it
    return namespace["SelfAttention_v1"], namespace["SelfAttention_v2"]


@pytest.mark.parametrize("version", [0, 1])
def test_the_lesson_classes_equal_the_helpers_classes(version):
    mine = _notebook_classes()[version]
    theirs = (helpers.SelfAttention_v1, helpers.SelfAttention_v2)[version]
    x_one, x_batch = torch.rand(6, 5, generator=torch.Generator().manual_seed(1)), \
        torch.rand(3, 6, 5, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(123)
    a = mine(5, 4)
    torch.manual_seed(123)
    b = theirs(5, 4)
    with torch.no_grad():
        for x in (x_one, x_batch):
            torch.testing.assert_close(a(x), b(x))
            for got, expected in zip(a(x, return_weights=True), b(x, return_weights=True)):
                torch.testing.assert_close(got, expected)


def test_the_book_numbers_of_the_lesson_classes():
    v1, v2 = _notebook_classes()
    _, inputs = helpers.your_journey()
    torch.manual_seed(123)
    out_v1 = v1(3, 2)(inputs)
    torch.manual_seed(789)
    out_v2 = v2(3, 2)(inputs)
    torch.testing.assert_close(out_v1[0], torch.tensor([0.2996, 0.8053]), atol=1e-4, rtol=0)
    torch.testing.assert_close(out_v2[0], torch.tensor([-0.0739, 0.0713]), atol=1e-4, rtol=0)


def test_training_the_lesson_class_gives_the_helpers_run(task, run):
    mine = helpers.train_attention(task, _notebook_classes()[1], num_steps=200, batch_size=64, lr=0.02, seed=123,
                                   snapshot_every=5)
    assert mine.losses == run.losses and torch.equal(mine.snapshots, run.snapshots)


# --- the initialisation deep dive ---------------------------------------------------------------------------------
INITS = {"torch.rand": helpers.SelfAttention_v1, "nn.Linear": helpers.SelfAttention_v2}


def test_init_table_says_what_the_lesson_says():
    rows = {(r.d_in, r.init): r for r in init_stats(INITS, widths=(3, 32, 256))}
    for d_in in (32, 256):
        assert round(rows[d_in, "torch.rand"].largest, 2) == 1.00          # one-hot rows
        assert rows[d_in, "torch.rand"].spread > 10
    for d_in in (3, 32, 256):
        assert rows[d_in, "nn.Linear"].spread < 0.1                        # the spread stays small
        assert abs(rows[d_in, "nn.Linear"].largest - 1 / 6) < 0.02         # near uniform
    assert rows[256, "torch.rand"].spread > rows[32, "torch.rand"].spread > rows[3, "torch.rand"].spread


def test_init_table_is_one_column_per_init_that_says_its_scales():
    lines = init_table(INITS, widths=(3, 32)).splitlines()
    assert lines[0].split() == ["torch.rand", "nn.Linear"] and len(lines) == 6
    assert "untrained, d_k = 2," in lines[1]
    rows = {" ".join(line[:LABEL_WIDTH].split()): line[LABEL_WIDTH:].split() for line in lines[2:]}
    assert rows["spread (std) of S/√d_k d_in = 3"] == ["0.39", "0.07"]
    largest = rows["(1.00: one-hot; 0.17: uniform) d_in = 32"]                   # the row says its scale
    assert largest[0] == "1.00" and float(largest[1]) < 0.2                           # one-hot vs near uniform


def test_init_measurements_leave_the_random_stream_alone():
    state = torch.get_rng_state()
    init_stats(INITS, widths=(3,))
    init_side_by_side(INITS, d_in=8)
    assert torch.equal(torch.get_rng_state(), state)


def test_init_side_by_side_shows_both_inits_on_one_scale():
    fig = init_side_by_side(INITS, d_in=32)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2 and len(fig.axes) == 3
    left = torch.as_tensor(heatmaps[0].images[0].get_array())
    right = torch.as_tensor(heatmaps[1].images[0].get_array())
    assert (left.argmax(dim=-1) == left.argmax(dim=-1)[0]).all()           # every row picks the same key
    assert (right - 1 / 6).abs().max() < 0.05                              # close to 1/6 everywhere
    assert "torch.rand" in heatmaps[0].get_title() and "nn.Linear" in heatmaps[1].get_title()


def test_saturation_explains_the_stall(task):
    runs = {(cls.__name__, 0): helpers.train_attention(task, cls, seed=0) for cls in INITS.values()}
    one_hot_v1, grad_v1 = saturation(runs["SelfAttention_v1", 0].model, task)
    one_hot_v2, grad_v2 = saturation(runs["SelfAttention_v2", 0].model, task)
    assert one_hot_v1 == 1.0 and grad_v1 < 1e-12                           # every row one-hot, no gradient
    assert one_hot_v2 == 0.0 and grad_v2 > 1e-6
    grads = [p.grad for p in runs["SelfAttention_v1", 0].model.parameters()]
    saturation(runs["SelfAttention_v1", 0].model, task)
    assert all(g is None or torch.equal(g, h) for g, h in                   # .grad fields untouched
               zip(grads, [p.grad for p in runs["SelfAttention_v1", 0].model.parameters()]))


def test_trained_tables_are_one_row_per_init_that_say_what_the_lesson_says(task):
    inits = {**INITS, "positive": helpers.SelfAttention_v1}  # any number of classes, each its own row
    tables = trained_tables(task, inits, seeds=(0,))
    assert str(tables) == "\n\n".join((tables.outcome, tables.softmax, tables.adam))
    blocks = [block.splitlines() for block in tables]
    assert len(blocks) == 3                                                  # outcome, softmax, Adam
    outcome, softmax, adam = blocks
    assert "d_in = 32, d_k = 6, 200 steps, seeds 0" in outcome[0]            # what was trained
    assert "weight on target ≥ 0.9" in outcome[1] and "final loss" in outcome[1]
    assert "one-hot rows of A" in softmax[1] and "gradient norm at W_q" in softmax[1]
    assert softmax[2].split() == ["init", "untrained", "trained", "untrained", "untrained", "trained"]
    assert "lr = 0.02, eps = 1e-08" in adam[0] and "Adam's first step" in adam[1]
    rows = {line.split()[0]: line.split()[1:] for line in outcome[2:]}
    assert list(rows) == ["torch.rand", "nn.Linear", "positive"]
    assert rows["torch.rand"][0] == "never" and float(rows["torch.rand"][1]) > 1.7   # stalls near a blind guess
    assert rows["nn.Linear"][0].isdigit() and float(rows["nn.Linear"][1]) < 0.1      # learns the task
    assert rows["positive"] == rows["torch.rand"]                                     # same class, same numbers
    hot = {line.split()[0]: line.split()[1:] for line in softmax[3:]}
    assert hot["torch.rand"] == ["94%", "100%", "1.00", "4e-05", "<", "1e-12"]
    assert hot["nn.Linear"][:2] == ["0%", "0%"] and float(hot["nn.Linear"][2]) < 0.5  # far from one-hot
    steps = {line.split()[0]: [float(v.rstrip("%")) for v in line.split()[1:]] for line in adam[2:]}
    for name in ("torch.rand", "nn.Linear"):                                 # Adam: about lr * sqrt(entries)
        assert abs(steps[name][1] - 0.02 * (32 * 6) ** 0.5) < 0.02
    assert steps["torch.rand"][2] < 5 and steps["nn.Linear"][2] > 15        # short against long weights
    assert steps["torch.rand"][3] < 2 < 6 < steps["nn.Linear"][3]           # how far W_q moved


def test_adam_first_step_leaves_the_model_alone(task):
    model = helpers.SelfAttention_v2(32, 6)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert 0.2 < lesson03_live.adam_first_step(model, task) < 0.3
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(p.grad is None for p in model.parameters())


def test_train_inits_trains_on_one_thread_and_gives_the_caller_its_threads_back(task, monkeypatch):
    seen = []
    real = lesson03_live.train_attention
    monkeypatch.setattr(lesson03_live, "train_attention",
                        lambda *args, **kwargs: seen.append(torch.get_num_threads()) or real(*args, **kwargs))
    threads = torch.get_num_threads()
    runs = train_inits(task, INITS, seeds=(0,), num_steps=5)
    assert seen == [1, 1] and torch.get_num_threads() == threads
    assert all(len(run.losses) == 5 for run in runs.values())


@pytest.mark.parametrize("call, error", [
    (lambda: trained_tables(helpers.PreviousTokenTask(), INITS, seeds=()), ValueError),
    (lambda: trained_tables(helpers.PreviousTokenTask(), {}), TypeError),
    (lambda: init_table({"only": 3}), TypeError),
    (lambda: init_side_by_side({"only": helpers.SelfAttention_v1}), TypeError),
    (lambda: init_side_by_side({"a": helpers.SelfAttention_v1, "b": 3}), TypeError),
    (lambda: saturation(helpers.SelfAttention_v2(32, 6), "task"), TypeError),
])
def test_init_helpers_reject_bad_input(call, error):
    with pytest.raises(error):
        call()


def test_reverse_all_dims_reports_the_shape_and_the_warning():
    shape, message = reverse_all_dims(torch.zeros(3, 6, 2))
    assert shape == (2, 6, 3)
    assert "x.T" in message                                   # the warning's first sentence, or "already shown"
    assert reverse_all_dims(torch.zeros(3, 6, 2))[1]          # a second call still answers (PyTorch warns once)
    with pytest.raises(TypeError, match="three or more"):
        reverse_all_dims(torch.zeros(6, 2))


def test_the_training_excerpt_the_lesson_prints_is_self_contained():
    # the lesson prints this span of train_attention: no random-stream plumbing, no name it does not define
    cell = next("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]
                if c["cell_type"] == "code" and "show_source(helpers.train_attention" in "".join(c["source"]))
    excerpt = source_excerpt(helpers.train_attention, start="vocab_size = len", end="losses.append(loss.item())",
                             skip=(("probe.record(model, step=0)", "probe.record(model, step=0)"),))
    assert 'start="vocab_size = len"' in cell and 'end="losses.append(loss.item())"' in cell
    assert "probe" not in excerpt and "fork_rng" not in excerpt and "Generator().manual_seed(seed)" in excerpt
    body = excerpt.split("TrainingRun:\n", 1)[1]
    assert body.count("vocab_size = len(task.vocab)") == 1 and len(body.splitlines()) <= 20


def test_mean_largest_weight_spans_uniform_to_one_hot():
    from helpers.live.lesson03 import mean_largest_weight
    from helpers.tasks import PreviousTokenTask
    task = PreviousTokenTask()
    model = helpers.SelfAttention_v2(task.d_in, len(task.vocab))
    with torch.no_grad():
        for layer in (model.W_query, model.W_key):
            layer.weight.zero_()                       # every score 0: uniform rows
    assert mean_largest_weight(model, task) == pytest.approx(1 / task.num_tokens, abs=1e-6)
    with torch.no_grad():
        model.W_query.weight.normal_(0, 1e4)             # huge scores: one-hot rows
        model.W_key.weight.normal_(0, 1e4)
    assert mean_largest_weight(model, task) > 0.99
    with pytest.raises(TypeError, match="task"):
        mean_largest_weight(model, "task")
