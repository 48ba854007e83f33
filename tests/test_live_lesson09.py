"""Notebook 09's pictures: the sinusoidal figure shows P and its distance-only dot products, every control of the
RoPE explorer changes the picture (and moving both positions together keeps the score), and the long-sequence
heatmaps show the models' own weights."""

import numpy as np
import pytest
import torch

from helpers.live.lesson09 import long_sequence_figure, rope_explorer, rope_scores, sinusoidal_figure
from helpers.position_model import PositionTask, train_position_model
from helpers.positions import apply_rope, sinusoidal_positions


def test_sinusoidal_figure_shows_the_encoding_and_coinciding_dot_products():
    fig = sinusoidal_figure(num_tokens=64, d_in=32, starts=(0, 20))
    shown = torch.as_tensor(np.asarray(fig.axes[0].images[0].get_array()))
    torch.testing.assert_close(shown, sinusoidal_positions(64, 32))
    first, second = (np.asarray(line.get_ydata(), dtype=float) for line in fig.axes[1].lines[:2])
    assert len(first) == 44 and np.allclose(first, second, atol=1e-4)
    assert first[0] == pytest.approx(16.0, abs=1e-4)   # |P_i|^2 = d_in / 2
    assert "$T = 64$" in fig.axes[0].get_title()
    assert "from $i = 0$ and from $i = 20$" in fig.axes[1].get_title()
    assert "(offsets 0 to 43: from $i = 20$, position 63 is 43 on)" in fig.axes[1].get_title()


@pytest.fixture()
def pair_of_vectors():
    generator = torch.Generator().manual_seed(3)
    return torch.randn(8, generator=generator), torch.randn(8, generator=generator)


def _title(view, axis):
    return view.fig.axes[axis].get_title()


def test_every_control_of_the_rope_explorer_changes_the_picture(pair_of_vectors):
    query, key = pair_of_vectors
    view = rope_explorer(query, key, query_position=3, key_position=5, pair=0)
    assert view.initial_png == bytes(view.image.value)
    assert repr(view) == "LiveFigure(query_position=3, key_position=5, pair=0)"
    pictures = [bytes(view.image.value)]
    for name, value in (("query_position", 10), ("key_position", 12), ("pair", 1)):
        view.controls[name].value = value
        pictures.append(bytes(view.image.value))
        assert pictures[-1] != pictures[-2], f"moving {name} must change the picture"
    assert "r = 1" in _title(view, 0)


def test_moving_both_positions_together_keeps_the_score_dot(pair_of_vectors):
    query, key = pair_of_vectors
    view = rope_explorer(query, key, query_position=3, key_position=5)
    dot = view.fig.axes[1].lines[-1]
    before = (np.asarray(dot.get_xdata()).copy(), np.asarray(dot.get_ydata()).copy())
    view.controls["query_position"].value = 10
    view.controls["key_position"].value = 12
    assert np.allclose(dot.get_xdata(), before[0]) and np.allclose(dot.get_ydata(), before[1], atol=1e-5)
    expected = float(apply_rope(query[None], torch.tensor([10]))[0] @ apply_rope(key[None], torch.tensor([12]))[0])
    assert f"{expected:.3f}" in _title(view, 1)
    assert "offset $j - i = 2$" in _title(view, 1)


def test_the_arrows_are_the_turned_pair(pair_of_vectors):
    query, key = pair_of_vectors
    view = rope_explorer(query, key, query_position=7, key_position=2, pair=1)
    arrows = view.fig.axes[0].patches       # faint q, faint k, turned q, turned k
    turned_q = apply_rope(query[None], torch.tensor([7]))[0, 2:4]
    assert arrows[2]._posA_posB[1] == pytest.approx((float(turned_q[0]), float(turned_q[1])), abs=1e-6)
    assert arrows[0]._posA_posB[1] == pytest.approx((float(query[2]), float(query[3])), abs=1e-6)


def test_rope_scores_curve_and_errors(pair_of_vectors):
    query, key = pair_of_vectors
    scores = rope_scores(query, key, torch.tensor([0, 5, 9]), torch.tensor([3, 8, 12]))
    torch.testing.assert_close(scores, scores[:1].expand(3), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="same shape"):
        rope_explorer(query, key[:6])


def test_long_sequence_figure_shows_each_models_weights():
    task = PositionTask("copy_back", offset=2)
    models = {"RoPE": train_position_model(task, "rope", num_steps=5), "none": train_position_model(task, "none",
                                                                                                     num_steps=5)}
    ids = task.sample(1, 12, torch.Generator().manual_seed(5))[0]
    fig = long_sequence_figure(models, task, ids, head=1)
    for ax, model in zip(fig.axes[:len(models)], models.values()):
        with torch.no_grad():
            _, weights = model(ids[None], return_weights=True)
        torch.testing.assert_close(torch.as_tensor(np.asarray(ax.images[0].get_array())), weights[0, 1])
        assert "head 1" in ax.get_title() and "$T = 12$" in ax.get_title()
        assert len([p for p in ax.patches]) == 12 - 2   # one red box per output with a source


def test_long_sequence_figure_marks_the_trained_length_and_labels_strong_other_diagonals():
    task = PositionTask("copy_back", offset=2)
    model = train_position_model(task, "rope", num_steps=200, seed=0)
    ids = task.sample(1, 32, torch.Generator().manual_seed(5))[0]
    plain = long_sequence_figure({"RoPE": model}, task, ids)
    marked = long_sequence_figure({"RoPE": model}, task, ids, trained_tokens=8)
    assert len(marked.axes[0].lines) == len(plain.axes[0].lines) + 2
    assert any(line.get_ydata()[0] == 7.5 for line in marked.axes[0].lines)
    labels = [t.get_text() for t in marked.axes[0].texts if "j - i" in t.get_text()]
    assert "$j - i = +17$" in labels and "$j - i = -2$" not in labels
    none = long_sequence_figure({"RoPE": model}, task, ids, min_diagonal_weight=1.1)
    assert not [t for t in none.axes[0].texts if "j - i" in t.get_text()]


def test_long_sequence_figure_labels_chosen_diagonals_clear_of_the_axis_labels():
    task = PositionTask("copy_back", offset=2)
    model = train_position_model(task, "rope", num_steps=5)
    ids = task.sample(1, 32, torch.Generator().manual_seed(5))[0]
    fig = long_sequence_figure({"RoPE": model, "other": model}, task, ids, labelled={"RoPE": (17, -21, -27)})
    labels = {t.get_text(): t for t in fig.axes[0].texts if "j - i" in t.get_text()}
    assert set(labels) == {"$j - i = +17$", "$j - i = -21$", "$j - i = -27$"}
    assert labels["$j - i = +17$"].xy == (17, -0.5)                                    # the column's top edge
    for offset in (-21, -27):                          # the arrow ends on a cell of its own diagonal
        column, row = labels[f"$j - i = {offset}$"].xy
        assert column - row == offset and 0 <= column and row < 32
    fig.canvas.draw()
    axes_box = fig.axes[0].get_window_extent()
    assert not labels["$j - i = +17$"].get_window_extent().overlaps(axes_box), "ahead: in the top margin"
    for offset in (-21, -27):   # behind: inside the panel, left-aligned right of the nearest diagonal behind,
        label = labels[f"$j - i = {offset}$"]                             # not in the gap by the y label
        text_x, text_y = label.xyann
        assert label.anncoords == "data" and label.get_ha() == "left"
        assert 32 - 1 - 21 < text_x < 31 - 6 and 0 <= text_y < 31, (offset, label.xyann)
    assert not [t for t in fig.axes[1].texts if "j - i" in t.get_text()]
    assert fig.axes[0].get_title().count("\n") == fig.axes[1].get_title().count("\n"), "titles at one height"
    assert len(fig.axes) == 3, "one shared colour bar, on the right"
    assert "every panel" in fig.axes[-1].get_ylabel(), "the shared scale is said on the colour bar"


def test_rope_explorer_title_subtracts_the_angles_it_shows(pair_of_vectors):
    import re
    query, key = pair_of_vectors
    for i, j in [(3, 5), (0, 7), (10, 12), (12, 10), (4, 4)]:
        view = rope_explorer(query, key, query_position=i, key_position=j)
        shown_q, shown_k, more = map(int, re.findall(r"(\d+)°", view.fig.axes[0].get_title()))
        assert more == (shown_k - shown_q) % 360, view.fig.axes[0].get_title()


def test_rope_explorer_draws_the_score_between_whole_offsets(pair_of_vectors):
    query, key = pair_of_vectors
    view = rope_explorer(query, key, max_position=10)
    dense, dots = view.fig.axes[1].lines[:2]           # the curve, then its dots at whole offsets
    x, y = np.asarray(dense.get_xdata(), dtype=float), np.asarray(dense.get_ydata(), dtype=float)
    assert len(x) > 10 * len(dots.get_xdata())
    whole = np.isclose(x, np.round(x), atol=1e-4)               # where the dense curve meets a whole offset, it is the dot
    np.testing.assert_allclose(y[whole], np.asarray(dots.get_ydata(), dtype=float), atol=1e-4)
