"""show_source: the signature and only the lines that teach, with '...' where lines were left out."""

import pytest

import helpers
from helpers.source import source_excerpt


def _example(a, b):
    """A docstring that the excerpt leaves out."""
    if a < 0:
        raise ValueError("a must be >= 0")
    total = a + b  # the line that teaches
    doubled = total * 2
    return doubled


def test_default_excerpt_is_the_body_without_the_docstring():
    text = source_excerpt(_example)
    assert text.splitlines()[0] == "def _example(a, b):"
    assert "docstring" not in text and "return doubled" in text


def test_start_end_and_skip_cut_the_body():
    text = source_excerpt(_example, start="total =", end="return")
    assert text.splitlines() == ["def _example(a, b):", "    ...", "    total = a + b  # the line that teaches",
                                 "    doubled = total * 2", "    return doubled"]
    text = source_excerpt(_example, start="if a", end="return", skip=(("if a", "raise"),))
    assert "raise" not in text and text.splitlines()[1] == "    ..."
    assert source_excerpt(_example, end="total =").splitlines()[-1] == "    ..."


def test_works_on_the_course_code(capsys):
    helpers.show_source(helpers.softmax_stable)
    printed = capsys.readouterr().out
    assert printed.startswith("def softmax_stable(") and "torch.exp" in printed


@pytest.mark.parametrize("kwargs, error, words", [
    ({"obj": 3}, TypeError, "function, method or class"),
    ({"obj": _example, "start": "no such line"}, ValueError, "does not occur"),
    ({"obj": _example, "start": ""}, TypeError, "non-empty string"),
    ({"obj": _example, "skip": ("total", "return")}, TypeError, "pairs"),
])
def test_bad_input(kwargs, error, words):
    with pytest.raises(error, match=words):
        source_excerpt(**kwargs)
