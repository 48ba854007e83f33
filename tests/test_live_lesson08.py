"""Notebook 08's pictures: the training scrubber shows exactly the saved weights, the static figures are labelled,
and the transformer-block schematic is drawn from its arguments."""

import numpy as np
import pytest
import torch

from helpers.diagrams.block import transformer_block_diagram
from helpers.live.lesson08 import heads_figure, ideal_pattern_figure, key_labels, query_labels, training_explorer
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
        assert list(view.fig.axes[2].lines[-1].get_xdata()) == [step, step]  # the red step line follows
        labels = [t.get_text() for t in view.fig.axes[0].get_yticklabels()]
        assert labels == query_labels(task, watch_ids[5], run.predictions[checkpoint, 5])
        pictures.add(bytes(view.image.value))
        locked_counts.append(int((on_mirror[checkpoint, 5] > 0.5).sum()))
    assert len(pictures) == 4, "every setting must change the picture"
    assert locked_counts == [0, 6, 16]  # the numbers the lesson prints after asking for a prediction
    assert repr(view) == "LiveFigure(step=100, example=5)"


def test_scrubber_axes_are_labelled_and_share_one_colour_bar(reversal):
    task, watch_ids, run = reversal
    view = training_explorer(run, task, watch_ids)
    heat_axes, curve_ax = view.fig.axes[:2], view.fig.axes[2]
    assert curve_ax.get_ylabel() and curve_ax.get_xlabel() == "training step"
    for ax in heat_axes:
        assert "query" in ax.get_ylabel() and "key" in ax.get_xlabel()
        assert ax.images[0].get_clim() == (0.0, 1.0)  # weights on a fixed 0..1 scale
    assert len(view.fig.axes) == 4  # two heatmaps, the curves, one colour bar


def test_static_figures(reversal):
    task, watch_ids, run = reversal
    fig = ideal_pattern_figure(task, watch_ids[0])
    torch.testing.assert_close(torch.as_tensor(np.asarray(fig.axes[0].images[0].get_array())), task.ideal_pattern())
    fig = heads_figure(run, task, watch_ids, steps=(0, 100))
    assert len(fig.axes) == 2 * 2 + 2  # 2 steps x 2 heads, one colour bar per row
    titles = [ax.get_title() for ax in fig.axes[:4] if ax.images]
    assert titles[0] == "$A$ of head 0, step 0" and "heads" not in " ".join(titles)
    figure_to_png(fig)  # draws without an error
    assert key_labels(task, watch_ids[0])[0] == "F·0"


def test_block_diagram_is_drawn_from_its_arguments():
    fig = transformer_block_diagram(num_layers=6, d_model=512, d_ff=2048, num_heads=8, vocab_size=37000)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    for expected in ("\\times\\,6", "512 \\to 2048", "H = 8", "37000", "layer norm", "KV cache", "He et al. 2016",
                     "Ba et al. 2016"):
        assert expected in texts, expected
    assert fig.get_figwidth() <= 12.0
    assert figure_to_png(fig)[:4] == b"\x89PNG"


@pytest.mark.parametrize("bad", [{"num_layers": 0}, {"d_model": 7.5}, {"num_heads": True}])
def test_block_diagram_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        transformer_block_diagram(**bad)
