"""Notebook 10's pictures: the explorer shows the model's own weights at every setting, padding is hatched where
the source is padded, the static figures are labelled, and the encoder-decoder schematic is drawn from its
arguments."""

import numpy as np
import pytest
import torch

from helpers.diagrams.encoder_decoder import encoder_decoder_diagram
from helpers.live.lesson10 import (PAD_ROW_STYLE, PAD_STYLE, cross_attention_explorer, cross_weights_figure,
                                   ideal_alignment_figure, output_labels)
from helpers.number_words import NumberWordsTask, train_number_words


@pytest.fixture(scope="module")
def trained():
    task = NumberWordsTask()
    watch_ids, _ = task.sample(8, torch.Generator().manual_seed(1), held_out=True)
    test_ids, _ = task.sample(200, torch.Generator().manual_seed(2), held_out=True)
    run = train_number_words(task, test_ids=test_ids, num_steps=150, seed=0)
    return task, watch_ids, run


def _shown(ax) -> torch.Tensor:
    return torch.as_tensor(np.asarray(ax.images[0].get_array()))


def _visible_hatches(ax) -> list[int]:
    """Columns whose hatched source-padding rectangle is visible."""
    return sorted(round(p.get_x() + 0.5) for p in ax.patches if p.get_hatch() == PAD_STYLE["hatch"]
                  and p.get_visible())


def _visible_padded_rows(ax) -> list[int]:
    """Rows whose see-through padded-target rectangle is visible."""
    return sorted(round(p.get_y() + 0.5) for p in ax.patches if p.get_hatch() == PAD_ROW_STYLE["hatch"]
                  and p.get_visible())


def test_every_control_changes_the_picture_and_shows_the_models_weights(trained):
    task, watch_ids, run = trained
    view = cross_attention_explorer(run.model, task, watch_ids, output_word=1, example=0)
    assert view.values() == {"output_word": 1, "example": 0}
    assert view.initial_png == bytes(view.image.value)
    with torch.no_grad():
        logits, weights = run.model(watch_ids, return_weights=True)   # (N, H, T_q, T_k)
    pictures = {bytes(view.image.value)}
    for output_word, example in ((2, 0), (2, 2), (0, 2), (3, 5)):
        view.controls["output_word"].value = output_word
        view.controls["example"].value = example
        pictures.add(bytes(view.image.value))
        padded = torch.nonzero(task.source_padding_mask(watch_ids[example])).flatten().tolist()
        heat_axes = [ax for ax in view.fig.axes if ax.get_title().startswith("$A$ of head")]
        bar_axes = [ax for ax in view.fig.axes if "the weights of" in ax.get_title()]
        assert len(heat_axes) == len(bar_axes) == 2
        for head in range(2):
            heat_ax, bar_ax = heat_axes[head], bar_axes[head]
            torch.testing.assert_close(_shown(heat_ax), weights[example, head])
            heights = torch.tensor([bar.get_height() for bar in bar_ax.patches if not bar.get_hatch()])
            torch.testing.assert_close(heights, weights[example, head, output_word])
            assert f"out {output_word}" in bar_ax.get_title()
            assert f"example {example}" in heat_ax.get_title()
            assert _visible_hatches(heat_ax) == padded and _visible_hatches(bar_ax) == padded
            padded_rows = torch.nonzero(task.targets(watch_ids[example]) == task.ignore_id).flatten().tolist()
            assert _visible_padded_rows(heat_ax) == padded_rows
            labels = [t.get_text() for t in heat_ax.get_xticklabels()]
            assert labels == task.source_labels(watch_ids[example])
        rows = [t.get_text() for t in view.fig.axes[0].get_yticklabels()]
        assert rows == output_labels(task, watch_ids[example], logits[example].argmax(dim=-1))
    assert len(pictures) == 5, "every move of a control must change the picture"
    assert repr(view) == "LiveFigure(output_word=3, example=5)"


def test_ideal_boxes_only_on_real_words(trained):
    task, watch_ids, run = trained
    example = next(i for i in range(8) if (task.targets(watch_ids[i]) == task.ignore_id).sum() == 3)   # one number
    view = cross_attention_explorer(run.model, task, watch_ids, example=example)
    red = [p for p in view.fig.axes[0].patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0) and p.get_visible()
           and not p.get_hatch() and p.get_width() == 1]
    assert sorted((round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in red) == [(0, 0), (0, 1)]


def test_static_figures(trained):
    task, watch_ids, run = trained
    fig = ideal_alignment_figure(task, watch_ids[0])
    needed = task.ideal_pattern().sum(dim=0)
    needed[2:] = 0                         # watched example 0 holds two numbers: rows 2 and 3 need nothing
    torch.testing.assert_close(_shown(fig.axes[0]), needed)
    assert "(4, 8)" in fig.axes[0].get_title()
    assert _visible_hatches(fig.axes[0]) == [4, 5, 6, 7]
    assert _visible_padded_rows(fig.axes[0]) == [2, 3]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["word $i$ needs digit $j$", "not needed", "source padding (hidden by the mask)",
                      "padded target word", "both"]
    assert len(fig.axes) == 1, "a 0/1 pattern needs a legend, not a colour bar"
    fig = cross_weights_figure(run.model, task, watch_ids[0], title="trained: ")
    with torch.no_grad():
        _, weights = run.model(watch_ids[:1], return_weights=True)
    for head in range(2):
        torch.testing.assert_close(_shown(fig.axes[head]), weights[0, head])
        assert fig.axes[head].get_title().startswith("trained: ")
        assert fig.axes[head].images[0].get_clim() == (0.0, 1.0)
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert rows[0].startswith("out 0: ") and "✗" not in "".join(rows)
    legend = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert legend == ["source padding (hidden by the mask)", "padded target word", "both",
                      "the digits a word needs"]
    assert not [t for t in fig.axes[0].texts if t.get_text()], "no numbers unless asked"
    written = cross_weights_figure(run.model, task, watch_ids[0], annotate=True)
    numbers = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in written.axes[0].texts}
    real_rows = (task.targets(watch_ids[0]) != task.ignore_id).nonzero().flatten().tolist()
    real_cols = (~task.source_padding_mask(watch_ids[0])).nonzero().flatten().tolist()
    assert set(numbers) == {(i, j) for i in real_rows for j in real_cols}, "real words on real digits only"
    for (i, j), text in numbers.items():
        assert text == f"{float(weights[0, 0, i, j]):.2f}"


def test_output_labels_mark_wrong_words():
    task = NumberWordsTask(max_numbers=2)
    source = torch.tensor([3, 1, 10, 10])
    assert output_labels(task, source) == ["out 0: thirty-one", "out 1: (padded target)"]
    assert output_labels(task, source, torch.tensor([3, 0])) == ["out 0: thirteen ✗", "out 1: (padded target)"]


def test_explorer_rejects_bad_examples(trained):
    task, watch_ids, run = trained
    with pytest.raises(ValueError, match="num_examples"):
        cross_attention_explorer(run.model, task, watch_ids[0])


def test_encoder_decoder_diagram_is_drawn_from_its_arguments():
    texts = " ".join(t.get_text() for t in encoder_decoder_diagram(3, 256, 4).axes[0].texts)
    for words in ("cross-attention, $H = 4$", "masked self-attention", "$\\times\\,3$", "256", "$K, V$ from $Y$"):
        assert words in texts, words
    assert "mask:" not in texts, "the diagram must not give exercise 1's masks away"
    with pytest.raises(ValueError, match="num_heads"):
        encoder_decoder_diagram(num_heads=0)


def test_trained_figure_hatches_the_padded_output_words(trained):
    """Watched example 2 has 2 real words of 4: each head's panel gets 2 see-through hatched rows."""
    task, watch_ids, run = trained
    fig = cross_weights_figure(run.model, task, watch_ids[2])
    padded = int((task.targets(watch_ids[2]) == task.ignore_id).sum())
    assert padded == 2
    for ax in fig.axes[:2]:
        rows = [p for p in ax.patches if p.get_hatch() == PAD_ROW_STYLE["hatch"] and p.get_visible()]
        assert len(rows) == padded and all(p.get_width() == task.num_keys for p in rows)


def test_explorer_outlines_the_chosen_row_boldly_and_writes_no_number_on_masked_bars(trained):
    task, watch_ids, run = trained
    view = cross_attention_explorer(run.model, task, watch_ids, output_word=1, example=1)   # `7 0`: 6 pads
    padding = task.source_padding_mask(watch_ids[1]).tolist()
    bar_axes = [ax for ax in view.fig.axes if ax.containers]
    assert len(bar_axes) == 2
    for ax in bar_axes:
        numbers = [t.get_text() for t in ax.texts]
        assert [bool(n) for n in numbers] == [not hidden for hidden in padding], numbers
    for ax in view.fig.axes:
        outlines = [p for p in ax.patches if p.get_edgecolor()[:3] == (0.0, 0.74901960784313726, 1.0)]
        for outline in outlines:
            assert outline.get_linewidth() >= 4.0 and outline.get_y() == 1 - 0.5
            assert outline.get_zorder() > 3, "above the red boxes"
