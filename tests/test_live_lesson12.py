"""Notebook 12's pictures: every control changes the picture, and the picture shows the numbers it claims."""

import numpy as np
import pytest
import torch

from helpers.induction import TOKENS, encode, train_induction_model
from helpers.live.lesson12 import best_heads, phase_change_figure, sequence_explorer, training_stepper
from helpers.plotting import figure_to_png


@pytest.fixture(scope="module")
def short_run():
    return train_induction_model(num_steps=20, checkpoint_every=10, num_eval=8)


def test_stepper_shows_each_checkpoints_weights_and_scores(short_run):
    view = training_stepper(short_run, step=0)
    pictures = {bytes(view.image.value)}
    assert list(view.controls["step"].options) == [0, 10, 20]
    heatmap_axes = [ax for ax in view.fig.axes if ax.images]   # the four heads, layer by layer (no colour bars)
    assert len(heatmap_axes) == 4
    for step in (10, 20):
        view.controls["step"].value = step
        index = short_run.checkpoint(step)
        for layer in range(2):
            for head in range(2):
                ax = heatmap_axes[2 * layer + head]
                shown = np.asarray(ax.images[0].get_array())
                expected = short_run.watch_weights[index, layer, head]
                seen = ~np.triu(np.ones_like(shown, dtype=bool), 1)
                np.testing.assert_allclose(shown[seen], expected.numpy()[seen], rtol=1e-6)
                assert np.isnan(shown[~seen]).all(), "the hidden future stays blank"
                assert f"previous-token {short_run.previous_token[index, layer, head]:.2f}" in ax.get_title()
        assert f"step {step}:" in view.fig.axes[-1].get_title()
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 3, "every step must change the picture"
    assert repr(view) == "LiveFigure(step=20)"


def test_sequence_explorer_follows_the_typed_tokens(short_run):
    view = sequence_explorer(short_run.model, "abcab", max_tokens=10)
    pictures = {bytes(view.image.value)}
    for text in ("xyzxy", "q"):
        view.controls["text"].value = text
        ids = encode(text)
        _, weights = short_run.model(ids, return_weights=True)
        shown = np.asarray(view.fig.axes[0].images[0].get_array())
        num_tokens = len(text) + 1
        np.testing.assert_allclose(np.tril(shown[:num_tokens, :num_tokens]),
                                   np.tril(weights[0][0, 0].detach().numpy()), rtol=1e-6)
        assert np.isnan(shown[num_tokens:]).all()
        labels = [t.get_text() for t in view.fig.axes[0].get_xticklabels()][:num_tokens]
        assert labels == [TOKENS[i] for i in ids[0].tolist()]
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 3
    view.controls["text"].value = "a b!c"   # what is not a letter or a digit is left out, and the title says so
    assert "only letters and digits" in view.fig._suptitle.get_text()
    view.controls["example"].value = "ABCDEFGH"    # an example button fills the text box and redraws
    assert view.controls["text"].value == "ABCDEFGH"
    labels = [t.get_text() for t in view.fig.axes[0].get_xticklabels()][:9]
    assert labels == ["<s>", *"ABCDEFGH"]
    with pytest.raises(ValueError, match="at most 9"):
        sequence_explorer(short_run.model, "abcdefghij", max_tokens=10)


def test_phase_change_figure_plots_the_runs_numbers(short_run):
    control = train_induction_model(num_layers=1, num_steps=20, checkpoint_every=10, num_eval=8)
    fig = phase_change_figure(short_run, control)
    loss_ax, score_ax = fig.axes
    assert list(loss_ax.lines[0].get_ydata()) == pytest.approx(short_run.in_context_losses)
    assert list(loss_ax.lines[1].get_ydata()) == pytest.approx(control.in_context_losses)
    previous_head, induction_head = best_heads(short_run)
    expected = short_run.prefix_matching[:, 1, induction_head].tolist()
    assert list(score_ax.lines[1].get_ydata()) == pytest.approx(expected)
    assert figure_to_png(fig).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="two layers"):
        phase_change_figure(control)
