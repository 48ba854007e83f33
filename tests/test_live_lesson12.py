"""Notebook 12's pictures: every control changes the picture, and the picture shows the numbers it claims."""

import numpy as np
import pytest
import torch

from helpers.circuits import direct_logit_attribution, ov_circuit, positional_qk_circuit
from helpers.induction import TOKENS, encode, repeated_sequences, train_induction_model
from helpers.live.lesson12 import (best_heads, circuits_figure, composition_over_training_figure,
                                   logit_attribution_figure, phase_change_figure, sequence_explorer, training_stepper)
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
    assert f"period Δ = {short_run.watch_period}" in view.fig._suptitle.get_text()
    starts = sorted(float(line.get_xdata()[0]) for line in heatmap_axes[0].lines
                    if line.get_xdata()[0] == line.get_xdata()[1])   # the vertical lines
    assert starts == [start - 0.5 for start in range(1, len(short_run.watch_ids), short_run.watch_period)]


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
        assert labels == ["•", *(TOKENS[i] for i in ids[0, 1:].tolist())]
        assert view.fig.axes[0].get_xlim() == (-0.5, num_tokens - 0.5), "the panel shows the typed tokens only"
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 3
    view.controls["text"].value = "a b!c"   # what is not a letter or a digit is left out, and the title says so
    assert "only letters and digits" in view.fig._suptitle.get_text()
    view.controls["example"].value = "ABCDEFGH"    # an example button fills the text box and redraws
    assert view.controls["text"].value == "ABCDEFGH"
    labels = [t.get_text() for t in view.fig.axes[0].get_xticklabels()][:9]
    assert labels == ["•", *"ABCDEFGH"]
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
    with_guess = phase_change_figure(short_run, control, seen_guess=1.98)
    assert with_guess.axes[0].lines[-1].get_ydata()[0] == pytest.approx(1.98)
    with pytest.raises(ValueError, match="two layers"):
        phase_change_figure(control)


def test_circuit_and_attribution_figures_show_the_circuits(short_run):
    model = short_run.model
    fig = circuits_figure(model, 1, 0)
    panels = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert len(panels) == 4
    bars = [ax.get_ylabel() for ax in fig.axes if not ax.get_title()]   # colour bars, in the panels' order
    assert bars[0] == "weight from positions alone" and all(label.startswith("scaled score") for label in bars[1:3])
    assert bars[3].startswith("logit")
    np.testing.assert_allclose(np.asarray(panels[3].images[0].get_array()), ov_circuit(model, 1, 0).numpy(),
                               rtol=1e-6)
    scores = positional_qk_circuit(model, 0, 1)                 # (T, T), nan in the future
    expected = scores.nan_to_num(float("-inf")).softmax(dim=-1).masked_fill(scores.isnan(), float("nan"))
    shown = np.ma.filled(panels[0].images[0].get_array().astype(float), np.nan)
    np.testing.assert_allclose(shown, expected.numpy(), rtol=1e-5)   # each row as the weights a softmax gives
    dots = [line for line in panels[0].lines if line.get_marker() == "o"][0]
    assert list(dots.get_xdata()) == scores.nan_to_num(float("-inf")).argmax(dim=-1).tolist()   # each row's largest
    ids, periods = repeated_sequences(1, generator=torch.Generator().manual_seed(3))
    names, parts = direct_logit_attribution(model, ids)
    fig = logit_attribution_figure(names, parts[:, 0], ids[0], int(periods[0]))
    shown = np.asarray(fig.axes[0].images[0].get_array())   # (C, T - 1): the right next token's centred logit
    centred = parts[:, 0, 5] - parts[:, 0, 5].mean(dim=-1, keepdim=True)
    np.testing.assert_allclose(shown[:, 5], centred[:, ids[0, 6]].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="parts"):
        logit_attribution_figure(names[:-1], parts[:, 0], ids[0], 4)
    scores = {side: torch.rand(len(short_run.steps), 2, 2) for side in "QKV"}
    fig = composition_over_training_figure(short_run, scores, 1, 0, baseline=0.1, phase=(0, 10))
    assert list(fig.axes[1].lines[0].get_ydata()) == pytest.approx(scores["K"][:, 1, 0].tolist())
