"""Notebook 08's pictures: the training scrubber shows exactly the saved weights, the static figures are labelled,
and the transformer-block schematic is drawn from its arguments."""

import numpy as np
import pytest
import torch

from helpers.diagrams.block import transformer_block_diagram
from helpers.live.lesson08 import (heads_figure, ideal_pattern_figure, key_labels, locking_figure, query_labels,
                                   training_explorer)
from helpers.plotting import figure_to_png
from helpers.toy_model import FetchTask, train_toy_model


@pytest.fixture(scope="module")
def reversal():
    task = FetchTask.reversal(num_tokens=8, vocab_size=10)
    watch_ids = task.sample(8, torch.Generator().manual_seed(1))
    test_ids = task.sample(1000, torch.Generator().manual_seed(2))
    run = train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=100, lr=0.01, seed=0,
                          checkpoint_every=4)
    return task, watch_ids, run


def test_scrubber_shows_the_saved_weights_at_every_setting(reversal):
    """What notebook 08 used to check in a lesson cell: moving the sliders shows exactly the saved weights."""
    task, watch_ids, run = reversal
    view = training_explorer(run, task, watch_ids)
    pictures = {bytes(view.image.value)}
    on_mirror = (run.weights * task.ideal_pattern()).sum(dim=-1)  # (checkpoints, examples, H, T)
    locked_counts = []
    for step in (0, 36, run.steps[-1]):
        view.controls["step"].value = step
        view.controls["example"].value = 5
        checkpoint = run.checkpoint(step)
        for head in range(2):
            shown = torch.as_tensor(np.asarray(view.fig.axes[head].images[0].get_array()))
            torch.testing.assert_close(shown, run.weights[checkpoint, 5, head])
            assert f"step {step}" in view.fig.axes[head].get_title()
            assert "watched example 5" in view.fig.axes[head].get_title()
            assert "accuracy" not in view.fig.axes[head].get_title()   # said once, by the step line
        assert list(view.fig.axes[2].lines[-1].get_xdata()) == [step, step]  # the red step line follows
        accuracy_text = [t.get_text() for t in view.fig.axes[2].texts if "held-out accuracy" in t.get_text()]
        assert accuracy_text == [f"step {step}: held-out accuracy {run.accuracies[checkpoint]:.0%}"]
        labels = [t.get_text() for t in view.fig.axes[0].get_yticklabels()]
        assert labels == query_labels(task, watch_ids[5], run.predictions[checkpoint, 5])
        pictures.add(bytes(view.image.value))
        locked_counts.append(int((on_mirror[checkpoint, 5] > 0.5).sum()))
    assert len(pictures) == 4, "every setting must change the picture"
    assert locked_counts == [0, 6, 16]  # the numbers the lesson prints under the scrubber
    assert repr(view) == "LiveFigure(step=100, example=5)"


def test_scrubber_starts_where_asked_and_its_legend_covers_no_curve(reversal):
    """The picture a reader sees without a kernel is the starting one: it must show a step where learning happens."""
    task, watch_ids, run = reversal
    view = training_explorer(run, task, watch_ids, step=32, example=3)
    assert view.values() == {"step": 32, "example": 3}
    assert "watched example 3, step 32" in view.fig.axes[0].get_title()
    assert view.initial_png == bytes(view.image.value)
    curve_ax = view.fig.axes[2]
    assert "sharpen" in curve_ax.get_title() and "follows" not in curve_ax.get_title()
    view.fig.canvas.draw()
    box = curve_ax.get_legend().get_window_extent().transformed(curve_ax.transData.inverted())
    for line in curve_ax.lines[:3]:   # accuracy and the two heads' weight on the source
        xs, ys = (np.asarray(v, dtype=float) for v in line.get_data())
        inside = (xs >= box.x0) & (xs <= box.x1) & (ys >= box.y0) & (ys <= box.y1)
        assert not inside.any(), f"the legend covers {line.get_label()!r}"
    with pytest.raises(ValueError, match="no checkpoint"):
        training_explorer(run, task, watch_ids, step=33)


def test_locking_figure_shows_the_weight_on_the_source_per_row_and_step(reversal):
    task, watch_ids, run = reversal
    fig = locking_figure(run, task)
    on_source = (run.weights * task.ideal_pattern()).sum(dim=-1).mean(dim=1)   # (S, H, T)
    for head in range(2):
        shown = torch.as_tensor(np.asarray(fig.axes[head].images[0].get_array()))
        torch.testing.assert_close(shown, on_source[:, head].T)
        assert fig.axes[head].images[0].get_clim() == (0.0, 1.0)
        # A two-way scale centred at the lock threshold: 0.45 and 0.55 get different hues, 0.5 is white.
        cmap = fig.axes[head].images[0].get_cmap()
        low, middle, high = (np.asarray(cmap(v)[:3]) for v in (0.45, 0.5, 0.55))
        assert (middle > 0.95).all() and low[0] > low[2] and high[2] > high[0]
        ticks = [int(t.get_text()) for t in fig.axes[head].get_xticklabels()]
        assert ticks == run.steps   # every checkpoint labelled, 28 and 44 included
    assert fig.axes[1].get_xlabel() == "training step"
    assert len(fig.axes) == 3  # two panels, one colour bar
    colorbar_ax = fig.axes[2]
    assert [list(line.get_ydata()) for line in colorbar_ax.lines] == [[0.5, 0.5]]   # the lock threshold is marked
    assert "0.5" in colorbar_ax.get_ylabel()
    assert fig.get_figwidth() <= 12.0
    # What the lesson says about the picture: the two ends pass 0.5 by step 28, before any other row; every row
    # has passed it by step 44.
    crossed = on_source > 0.5                                                  # (S, H, T)
    assert crossed[run.checkpoint(28)][:, [0, 7]].all() and not crossed[run.checkpoint(28)][:, 1:7].any()
    assert not crossed[run.checkpoint(40)].all() and crossed[run.checkpoint(44)].all()


def test_the_lesson_s_printed_numbers_sit_away_from_rounding_edges(reversal):
    """Printed rounded, these numbers must not flip on a device whose sums differ in the last digits."""
    task, watch_ids, run = reversal
    on_source = (run.weights * task.ideal_pattern()).sum(dim=-1).mean(dim=(1, 3))   # (S, H)
    for value, decimals in [(v, 3) for v in on_source[0].tolist()] + [(v, 2) for v in on_source[-1].tolist()]:
        scaled = value * 10 ** decimals
        assert abs(scaled - round(scaled)) < 0.45, value
    for checkpoint in (0, run.checkpoint(36), -1):   # printed with one decimal in section 5
        for value in on_source[checkpoint].tolist():
            assert abs(value * 10 - round(value * 10)) < 0.45, value
    assert run.accuracies[-1] > 0.996
    # "The accuracy passes 90% at step 36, when the heads put only about half their weight on the source."
    at_36 = run.checkpoint(36)
    assert run.accuracies[at_36 - 1] < 0.9 < run.accuracies[at_36]
    assert ((0.45 < on_source[at_36]) & (on_source[at_36] < 0.65)).all()


def test_train_toy_model_takes_the_optimiser_the_lesson_passes(reversal):
    """Section 4 passes optimizer=torch.optim.Adam: the default, so the run is the one it always was."""
    task, watch_ids, run = reversal
    test_ids = task.sample(1000, torch.Generator().manual_seed(2))
    short = dict(watch_ids=watch_ids, test_ids=test_ids, num_steps=8, lr=0.01, seed=0, checkpoint_every=4)
    adam = train_toy_model(task, **short, optimizer=torch.optim.Adam)
    assert adam.losses == run.losses[:8]
    sgd = train_toy_model(task, **short, optimizer=torch.optim.SGD)
    assert sgd.losses[0] == run.losses[0] and sgd.losses[1:] != run.losses[1:8]   # same start, other updates
    with pytest.raises(TypeError, match="optimiser class"):
        train_toy_model(task, **short, optimizer=torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))


def test_scrubber_axes_are_labelled_and_share_one_colour_bar(reversal):
    task, watch_ids, run = reversal
    view = training_explorer(run, task, watch_ids)
    heat_axes, curve_ax = view.fig.axes[:2], view.fig.axes[2]
    assert curve_ax.get_ylabel() and curve_ax.get_xlabel() == "training step"
    baselines = " ".join(t.get_text() for t in curve_ax.texts)
    assert "chance accuracy, 1/10" in baselines and "uniform weights, 1/T = 1/8" in baselines
    # The curves sit below the heatmaps, full width: no colour-bar label next to another panel's axis label.
    assert curve_ax.get_position().y1 < min(ax.get_position().y0 for ax in heat_axes)
    for ax in heat_axes:
        assert "query" in ax.get_ylabel() and "key" in ax.get_xlabel()
        assert ax.images[0].get_clim() == (0.0, 1.0)  # weights on a fixed 0..1 scale
    assert len(view.fig.axes) == 4  # two heatmaps, the curves, one colour bar


def test_static_figures(reversal):
    task, watch_ids, run = reversal
    fig = ideal_pattern_figure(task, watch_ids[0])
    torch.testing.assert_close(torch.as_tensor(np.asarray(fig.axes[0].images[0].get_array())), task.ideal_pattern())
    assert query_labels(task, watch_ids[0])[0] == "out 0: B"   # the same "out i: X" as the trained heatmaps
    fig = heads_figure(run, task, watch_ids, steps=(0, 100))
    assert len(fig.axes) == 2 * 2 + 2  # 2 steps x 2 heads, one colour bar per row
    stretched = heads_figure(run, task, watch_ids, vmax=0.3)
    assert stretched.axes[0].images[0].get_clim() == (0.0, 0.3) and "colour scale 0 to 0.3" in stretched.axes[0].get_title()
    titles = [ax.get_title() for ax in fig.axes[:4] if ax.images]
    assert titles[0] == "$A$ of head 0, step 0" and "heads" not in " ".join(titles)
    assert ideal_pattern_figure(task, watch_ids[0]).axes[0].get_title() == "Ideal weights $A$ for reversal"
    figure_to_png(fig)  # draws without an error
    assert key_labels(task, watch_ids[0])[0] == "F·0"


def test_block_diagram_is_drawn_from_its_arguments():
    fig = transformer_block_diagram(num_layers=6, d_model=512, d_ff=2048, num_heads=8, vocab_size=37000)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    for expected in ("\\times\\,6", "512 \\to 2048", "H = 8", "37000", "layer norm", "He et al. 2016",
                     "Ba et al. 2016", "Hendrycks and Gimpel 2016", "Vaswani et al. 2017", "read-out"):
        assert expected in texts, expected
    assert fig.get_figwidth() <= 12.0
    assert figure_to_png(fig)[:4] == b"\x89PNG"


def test_block_diagram_says_what_its_outline_and_fill_mean():
    fig = transformer_block_diagram()
    joined = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "no causal mask" in joined and "outlined blue" in joined and "filled yellow" in joined
    assert "KV cache" not in joined and "linear output layer" not in joined   # one name: the read-out
    assert "ACROSS" not in joined and "without a bias" in joined   # GPT-2's output layer is the tied wte
    # Red means the residual paths only.
    red = [p for p in fig.axes[0].patches if p.get_edgecolor()[:3] == (203 / 255, 24 / 255, 29 / 255)]
    assert red and all(type(p).__name__ == "FancyArrowPatch" for p in red)
    assert min(t.get_fontsize() for t in fig.axes[0].texts) >= 10   # readable at notebook width


@pytest.mark.parametrize("bad", [{"num_layers": 0}, {"d_model": 7.5}, {"num_heads": True}])
def test_block_diagram_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        transformer_block_diagram(**bad)


def test_position_scores_figure_draws_one_panel_per_head_with_the_ideal_boxed():
    import torch
    from matplotlib.patches import Rectangle

    from helpers.live.lesson08 import position_scores_figure
    from helpers.toy_model import FetchTask

    task = FetchTask.reversal(num_tokens=5, vocab_size=6)
    scores = torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(0)) * 4
    fig = position_scores_figure(scores, task)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("Head")]
    assert [ax.get_title() for ax in panels] == [f"Head {h}: position-only scores" for h in range(3)]
    for ax in panels:
        boxes = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_fill()]
        assert sorted((round(b.get_y() + 0.5), round(b.get_x() + 0.5)) for b in boxes) == [(i, 4 - i) for i in range(5)]
        assert "-0" not in [t.get_text() for t in ax.texts]
    with pytest.raises(ValueError, match="position_scores"):
        position_scores_figure(scores[:, :4], task)


def test_the_try_it_settings_the_lesson_names_behave_as_it_says(reversal):
    """"optimizer=torch.optim.SGD with lr=3.0: plain SGD needs a far larger step than Adam": at the lesson's lr=0.01
    plain SGD learns nothing in 100 steps, at lr=3.0 it reverses; a run that never reaches 90% (d_model 8) still has
    a checkpoint to open the scrubber at, as section 4 picks it."""
    task, watch_ids, _ = reversal
    test_ids = task.sample(1000, torch.Generator().manual_seed(2))
    common = dict(watch_ids=watch_ids, test_ids=test_ids, num_steps=100, seed=0, checkpoint_every=4)
    assert train_toy_model(task, **common, lr=0.01, optimizer=torch.optim.SGD).accuracies[-1] < 0.15
    assert train_toy_model(task, **common, lr=3.0, optimizer=torch.optim.SGD).accuracies[-1] > 0.95
    narrow = train_toy_model(task, **common, lr=0.01, d_model=8)
    assert max(narrow.accuracies) < 0.9
    first_90 = next((c for c, acc in enumerate(narrow.accuracies) if acc >= 0.9), len(narrow.steps) - 1)
    training_explorer(narrow, task, watch_ids, step=narrow.steps[first_90])


def test_without_positions_every_row_puts_less_weight_on_keys_holding_its_own_letter(reversal):
    """The deep dive's reading of the no-positions heatmap of watched example 0, in both heads."""
    task, watch_ids, _ = reversal
    test_ids = task.sample(1000, torch.Generator().manual_seed(2))
    blind = train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=100, lr=0.01, seed=0,
                            checkpoint_every=4, use_positions=False)
    weights = blind.weights[-1, 0]                                  # (H, T, T)
    same = watch_ids[0][:, None] == watch_ids[0][None, :]           # (T, T): key holds the query's letter
    own = weights.masked_fill(~same, -1.0).amax(dim=-1)            # (H, T): the most an own-letter key gets
    other = weights.masked_fill(same, 2.0).amin(dim=-1)            # (H, T): the least any other key gets
    assert (own < other).all()


def test_the_deep_dive_s_parts_of_the_score_are_the_numbers_it_states_away_from_rounding_edges(reversal):
    """"Within one row ... at most 0.9, 2.9 and 4.9 ... against position-only spans of 19 and 25; a softmax of the
    position-only scores alone puts 0.98 and 0.99 of a row's weight on its source": the four parts add up to the
    full scores, and each printed number sits away from the edge where rounding would flip it."""
    task, watch_ids, run = reversal
    attention, num_heads = run.model.attention, 2
    head_dim = 32 // num_heads

    def head_scores(query_rows, key_rows):
        with torch.no_grad():
            queries = attention.W_query(query_rows).view(len(query_rows), num_heads, head_dim).transpose(0, 1)
            keys = attention.W_key(key_rows).view(len(key_rows), num_heads, head_dim).transpose(0, 1)
            return queries @ keys.transpose(1, 2) / head_dim ** 0.5

    P, E_token = run.model.position_embedding.weight, run.model.token_embedding.weight
    x, letters = E_token[watch_ids[0]] + P, E_token[watch_ids[0]]
    torch.testing.assert_close(head_scores(x, x), head_scores(P, P) + head_scores(letters, P)
                               + head_scores(P, letters) + head_scores(letters, letters))
    widest = {name: (s.amax(dim=-1) - s.amin(dim=-1)).amax(dim=-1) for name, s in (
        ("position", head_scores(P, P)), ("letter", head_scores(E_token, E_token)),
        ("letter query", head_scores(E_token, P)), ("position query", head_scores(P, E_token)))}
    assert [round(float(widest[name].max()), 1) for name in ("letter", "letter query", "position query")] == \
        [0.9, 2.9, 4.9]
    assert [round(s) for s in widest["position"].tolist()] == [19, 25]
    alone = (head_scores(P, P).softmax(dim=-1) * task.ideal_pattern()).sum(dim=-1).mean(dim=-1)
    assert [round(w, 2) for w in alone.tolist()] == [0.98, 0.99]
    printed = [(v, 1) for spans in widest.values() for v in spans.tolist()] + [(w, 2) for w in alone.tolist()]
    for value, decimals in printed:
        scaled = value * 10 ** decimals
        assert abs(scaled - round(scaled)) < 0.45, value
