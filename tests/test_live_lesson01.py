"""Notebook 01's live picture and diagram: the controls drive the picture, the diagram follows its sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import helpers
from helpers.diagrams.retrieval import retrieval_diagram
from helpers.live.lesson01 import score_explorer, stretched_scores


@pytest.fixture()
def journey():
    return helpers.your_journey()


def test_stretched_scores_scale_row_and_column(journey):
    tokens, inputs = journey
    scores = inputs @ inputs.T
    step = tokens.index("step")
    new = stretched_scores(inputs, step, 3.0)
    torch.testing.assert_close(new[step, step], 9 * scores[step, step])
    torch.testing.assert_close(new[step, :step], 3 * scores[step, :step])
    torch.testing.assert_close(new[:step, step], 3 * scores[:step, step])
    torch.testing.assert_close(new[:step, :step], scores[:step, :step])
    torch.testing.assert_close(inputs, helpers.your_journey()[1])  # the inputs are not changed


def test_explorer_starts_on_journey_and_follows_its_controls(journey):
    tokens, inputs = journey
    explorer = score_explorer(inputs, tokens)
    assert repr(explorer) == "LiveFigure(query='journey', stretch_token='step', factor=1.0)"
    torch.testing.assert_close(torch.as_tensor(explorer.score_map.image.get_array()), inputs @ inputs.T)
    first = bytes(explorer.image.value)

    explorer.controls["query"].value = "step"
    explorer.controls["factor"].value = 3.0
    step = tokens.index("step")
    drawn = torch.as_tensor(np.asarray(explorer.score_map.image.get_array()))
    torch.testing.assert_close(drawn, stretched_scores(inputs, step, 3.0))
    heights = [bar.get_height() for bar in explorer.query_bars.bars]
    assert heights == pytest.approx(drawn[step].tolist())
    assert drawn[step, step] / (inputs[step] @ inputs[step]) == pytest.approx(9.0)
    assert drawn[step, 0] / (inputs[step] @ inputs[0]) == pytest.approx(3.0)
    assert explorer.query_bars.bars[step].get_facecolor() != explorer.query_bars.bars[0].get_facecolor()
    assert bytes(explorer.image.value) != first, "the picture did not change"

    explorer.controls["factor"].value = 1.0
    explorer.controls["query"].value = "journey"
    assert bytes(explorer.image.value) == first, "back at the start, the picture is the first one again"


def test_explorer_can_open_in_the_state_a_question_asks_about(journey):
    tokens, inputs = journey
    step = tokens.index("step")
    explorer = score_explorer(inputs, tokens, query="step", stretch="step", factor=3.0)
    assert repr(explorer) == "LiveFigure(query='step', stretch_token='step', factor=3.0)"
    drawn = torch.as_tensor(np.asarray(explorer.score_map.image.get_array()))
    torch.testing.assert_close(drawn, stretched_scores(inputs, step, 3.0))
    heights = [bar.get_height() for bar in explorer.query_bars.bars]
    assert heights == pytest.approx(drawn[step].tolist())
    # The stored picture is this state, not the default one.
    assert explorer.initial_png != score_explorer(inputs, tokens).initial_png
    # Room to move the slider both ways from there (a browser test presses ArrowRight on it).
    assert explorer.controls["factor"].min < 3.0 < explorer.controls["factor"].max
    with pytest.raises(ValueError, match="factor"):
        score_explorer(inputs, tokens, factor=5.0)


def test_explorer_stretch_token_control(journey):
    tokens, inputs = journey
    explorer = score_explorer(inputs, tokens)
    explorer.controls["stretch_token"].value = "Your"
    explorer.controls["factor"].value = -1.0
    drawn = torch.as_tensor(np.asarray(explorer.score_map.image.get_array()))
    assert (drawn[0, 1:] < 0).all() and drawn[0, 0] > 0, "a flipped token scores negative with the others"


def test_explorer_marks_the_stretched_token_in_its_labels(journey):
    """Without the controls (a stored picture), the labels say which token is stretched, and by how much."""
    tokens, inputs = journey
    explorer = score_explorer(inputs, tokens, query="journey", stretch="one", factor=3.0)
    one = tokens.index("one")

    def marks():
        axes = [explorer.score_map.ax.get_yticklabels(), explorer.score_map.ax.get_xticklabels(),
                explorer.query_bars.ax.get_xticklabels()]
        return [[(label.get_text(), label.get_fontweight()) for label in labels] for labels in axes]

    rows, columns, bars = marks()
    assert rows[one] == ("one\n×3.0", "bold") and columns[one] == bars[one] == ("one", "bold")
    assert all(weight == "normal" for i, (_, weight) in enumerate(rows + columns + bars) if i % len(tokens) != one)
    explorer.controls["stretch_token"].value = "Your"
    rows, columns, bars = marks()
    assert rows[0] == ("Your\n×3.0", "bold") and rows[one] == ("one", "normal") and bars[0][1] == "bold"
    explorer.controls["factor"].value = 1.0
    assert all(weight == "normal" and "×" not in text for labels in marks() for text, weight in labels)


def test_explorer_colour_bar_label_does_not_touch_the_bar_chart(journey):
    tokens, inputs = journey
    explorer = score_explorer(inputs, tokens)
    fig = explorer.fig
    renderer = fig.canvas.get_renderer()
    colorbar_label = explorer.score_map.colorbar.ax.yaxis.label.get_window_extent(renderer)
    bars_axes = explorer.query_bars.ax
    bars_left = min(bars_axes.yaxis.label.get_window_extent(renderer).x0,
                    bars_axes.get_tightbbox(renderer).x0)
    # At least a quarter inch of white between them (the default layout leaves about 8 px at 80 dpi).
    assert bars_left - colorbar_label.x1 >= 0.25 * fig.dpi, "the colour bar's label runs into the bar chart"


@pytest.mark.parametrize("num_tokens, d_k, d_v", [(3, 3, 3), (6, 3, 3), (6, 2, 4)])
def test_retrieval_diagram_is_sized_by_its_arguments(num_tokens, d_k, d_v):
    tokens = [f"t{i}" for i in range(num_tokens)]
    full = retrieval_diagram(tokens, 0, d_k=d_k, d_v=d_v)
    short = retrieval_diagram(tokens, 0, d_k=d_k, d_v=d_v, upto="scores")
    cells = lambda fig: sum(1 for p in fig.axes[0].patches if type(p).__name__ == "Rectangle" and p.get_fill())
    assert cells(short) == d_k + num_tokens * d_k + num_tokens  # query, keys, scores
    assert cells(full) == cells(short) + num_tokens + num_tokens * d_v + d_v  # weights, values, context
    assert full.get_figwidth() <= 12 and short.get_figwidth() < full.get_figwidth()


def test_retrieval_diagram_writes_the_numbers_and_checks_its_input(journey):
    tokens, inputs = journey
    scores = inputs @ inputs[1]
    fig = retrieval_diagram(tokens, 1, scores=scores, weights=torch.softmax(scores, dim=0))
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"0.95", "1.50", "0.24", "0.16"} <= texts
    with pytest.raises(ValueError, match="query_index"):
        retrieval_diagram(tokens, 6)
    with pytest.raises(ValueError, match="one per token"):
        retrieval_diagram(tokens, 1, scores=scores[:3])
    with pytest.raises(ValueError, match="upto"):
        retrieval_diagram(tokens, 1, upto="values")
    with pytest.raises(ValueError, match="inputs"):
        retrieval_diagram(tokens, 1, inputs=inputs[:4])
    with pytest.raises(ValueError, match="built"):
        retrieval_diagram(tokens, 1, built="weights")


def test_retrieval_diagram_of_notebook_01_shows_the_vectors_and_frames_the_scores(journey):
    tokens, inputs = journey
    fig = retrieval_diagram(tokens, 1, inputs=inputs, scores=inputs @ inputs[1], built="scores")
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("0.55") >= 2 and "0.87" in texts   # x_1 = [0.55, 0.87, 0.66] as the query and as key 1
    assert "1.50" in texts and any("built in this notebook" in t for t in texts)
    assert "$(T, d_k) = (6, 3)$" in texts                 # d_k taken from the inputs
    # The key of the query token itself is outlined, and the small texts stay readable (>= 9 pt).
    keys = [p for p in ax.patches if type(p).__name__ == "Rectangle" and p.get_fill()][3:3 + 18]  # after the query
    outlined = [p for p in ax.patches if type(p).__name__ == "Rectangle" and not p.get_fill()
                and p.get_height() == 1]
    assert len(outlined) == 1 and outlined[0].get_y() == pytest.approx(keys[3].get_y())  # key row 1 ("journey")
    assert outlined[0].get_x() == pytest.approx(keys[0].get_x()) and outlined[0].get_width() == 3
    assert min(t.get_fontsize() for t in ax.texts) >= 9
    assert fig.get_figwidth() <= 12


def test_explorer_colours_are_not_swamped_by_one_stretched_cell(journey):
    tokens, inputs = journey
    scores = inputs @ inputs.T
    limit = float(scores.abs().max())
    explorer = score_explorer(inputs, tokens, query="journey", stretch="one", factor=3.0)
    low, high = explorer.score_map.image.get_clim()
    # The colours span the scores before stretching, symmetric about zero, whatever the stretch.
    assert (low, high) == pytest.approx((-limit, limit))
    explorer.controls["factor"].value = 4.0
    assert explorer.score_map.image.get_clim() == pytest.approx((-limit, limit))
    one = tokens.index("one")
    # The numbers stay exact beyond the colour range (16 x one's squared length, about 10.6).
    assert explorer.score_map.texts[one][one].get_text() == f"{16 * float(scores[one, one]):.2f}"
    assert "±1.50" in explorer.score_map.colorbar.ax.get_ylabel()
    # A number beyond the colour range is framed (its cell only has the end colour); the others are not.
    framed = {(i, j) for i, row in enumerate(explorer.beyond_frames) for j, frame in enumerate(row)
              if frame.get_visible()}
    stretched = explorer.score_map.image.get_array()
    assert framed == {(i, j) for i in range(len(tokens)) for j in range(len(tokens))
                      if abs(float(stretched[i, j])) > limit}
    assert (one, one) in framed and (journey_row := tokens.index("journey"), journey_row) not in framed
    explorer.controls["factor"].value = 1.0
    assert not any(frame.get_visible() for row in explorer.beyond_frames for frame in row)
    # Unstretched cells keep distinct colours: the two scores of 'journey' with itself and with 'with' differ.
    cmap, norm = explorer.score_map.image.cmap, explorer.score_map.image.norm
    journey, with_ = tokens.index("journey"), tokens.index("with")
    assert cmap(norm(float(scores[journey, journey]))) != cmap(norm(float(scores[journey, with_])))


def test_explorer_shows_the_row_before_stretching_as_outlines(journey):
    tokens, inputs = journey
    scores = inputs @ inputs.T
    explorer = score_explorer(inputs, tokens, query="journey", stretch="one", factor=3.0)
    journey_row = tokens.index("journey")
    outlines = [bar.get_height() for bar in explorer.original_bars]
    assert outlines == pytest.approx(scores[journey_row].tolist())
    assert all(not bar.get_fill() for bar in explorer.original_bars)
    explorer.controls["query"].value = "step"
    explorer.controls["stretch_token"].value = "step"
    explorer.controls["factor"].value = -1.0
    step = tokens.index("step")
    assert [bar.get_height() for bar in explorer.original_bars] == pytest.approx(scores[step].tolist())
    # Every bar and outline fits in the value axis, the negative ones included.
    low, high = explorer.query_bars.ax.get_ylim()
    heights = [bar.get_height() for bar in explorer.query_bars.bars + explorer.original_bars]
    assert low <= min(heights) and max(heights) <= high


def test_the_stored_explorer_does_not_answer_the_prediction():
    """The lesson asks about stretching 'step'; the picture it stores opens on another token."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "01_dot_product_scores.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    calls = ["".join(c["source"]) for c in cells if "score_explorer(" in "".join(c["source"])
             and c["cell_type"] == "code" and "import" not in "".join(c["source"])]
    assert len(calls) == 1 and 'stretch="step"' not in calls[0] and 'stretch="one"' in calls[0]


def test_retrieval_diagram_faded_part_stays_legible(journey):
    tokens, inputs = journey
    fig = retrieval_diagram(tokens, 1, inputs=inputs, scores=inputs @ inputs[1], built="scores")
    ax = fig.axes[0]
    veil = [p for p in ax.patches if type(p).__name__ == "Rectangle" and p.get_facecolor()[:3] == (1.0, 1.0, 1.0)
            and p.get_alpha() is not None]
    assert len(veil) == 1 and veil[0].get_alpha() <= 0.45
    formula = [t for t in ax.texts if "\\sum_j" in t.get_text()]
    assert len(formula) == 1, "the context vector's formula is written once"
    assert formula[0].get_zorder() > veil[0].get_zorder() and formula[0].get_fontsize() >= 12
    assert formula[0].get_text().startswith("$z_{1} =")
    from matplotlib.colors import to_rgb
    assert max(to_rgb(formula[0].get_color())) <= 0.3, "dark grey, not faded"
    # Without the frame (notebook 02) the diagram keeps its formula under the context vector.
    plain = retrieval_diagram(tokens, 1, scores=inputs @ inputs[1])
    assert any(t.get_text() == "$\\sum_j a_{1j} v_j$" for t in plain.axes[0].texts)


def test_the_score_heatmap_is_drawn_at_a_readable_size(journey):
    from helpers.plotting import plot_heatmap

    tokens, inputs = journey
    fig = plot_heatmap(inputs @ inputs.T, tokens, tokens, width=6.5, height=5.5, value_fontsize=11)
    assert tuple(fig.get_size_inches()) == pytest.approx((6.5, 5.5))
    default = plot_heatmap(inputs @ inputs.T, tokens, tokens)
    assert tuple(default.get_size_inches()) == pytest.approx((5.0, 4.2))  # other lessons keep theirs
