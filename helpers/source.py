"""Print the lines of the course's canonical code that teach an idea, not the whole function.

A lesson derives an idea, checks that its derivation equals the version in ``helpers``, and then shows that
version. Most canonical functions start with argument checks and a long docstring that teach nothing at that
point, so :func:`show_source` prints the signature and only the span of lines the lesson is about.
"""

from __future__ import annotations

import inspect
import textwrap

__all__ = ["show_source", "source_excerpt"]


def _find(lines: list[str], text: str, start: int, what: str, name: str) -> int:
    for index in range(start, len(lines)):
        if text in lines[index]:
            return index
    raise ValueError(f"{what}={text!r} does not occur in the source of {name} (after line {start + 1})")


def source_excerpt(obj, start: str | None = None, end: str | None = None,
                   skip: tuple[tuple[str, str], ...] = ()) -> str:
    """The source of ``obj`` (a function, class or method) cut to the lines that teach.

    ``start``: text on the first line to show (default: the first line of the body after the docstring);
    ``end``: text on the last line to show (default: the last line). The ``def``/``class`` line is always kept,
    ``skip``: pairs ``(first_text, last_text)``; in order, each such span of lines inside the excerpt (e.g. a branch the
    lesson has not taught yet) is left out. ``...`` marks every place where lines were left out.
    """
    if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj)):
        raise TypeError(f"obj must be a function, method or class, got {type(obj).__name__}")
    for what, value in (("start", start), ("end", end)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise TypeError(f"{what} must be a non-empty string or None, got {value!r}")
    name = getattr(obj, "__qualname__", repr(obj))
    lines = textwrap.dedent(inspect.getsource(obj)).rstrip("\n").splitlines()
    header_end = 0  # the def/class line, and its continuation lines up to the one ending in ':'
    while not lines[header_end].rstrip().endswith(":"):
        header_end += 1
    body_start = header_end + 1
    doc = inspect.getdoc(obj)
    if doc is not None and body_start < len(lines) and lines[body_start].strip()[:3] in ('"""', "'''"):
        quote = lines[body_start].strip()[:3]
        close = body_start if lines[body_start].strip().count(quote) >= 2 and len(lines[body_start].strip()) > 3 \
            else _find(lines, quote, body_start + 1, "docstring end", name)
        body_start = close + 1
    first = _find(lines, start, body_start, "start", name) if start else body_start
    last = _find(lines, end, first, "end", name) if end else len(lines) - 1
    shown = lines[: header_end + 1]
    indent = " " * (len(lines[first]) - len(lines[first].lstrip()))
    if first > header_end + 1 and first > body_start:
        shown.append(indent + "...")
    hidden: set[int] = set()
    search_from = first  # spans are given in order, each searched after the previous one
    for pair in skip:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(t, str) and t for t in pair)):
            raise TypeError(f"skip must hold (first_text, last_text) pairs of strings, got {pair!r}")
        skip_first = _find(lines, pair[0], search_from, "skip start", name)
        skip_last = _find(lines, pair[1], skip_first, "skip end", name)
        if skip_last > last:
            raise ValueError(f"skip span {pair!r} runs past the end of the excerpt of {name}")
        hidden.update(range(skip_first, skip_last + 1))
        search_from = skip_last + 1
    for index in range(first, last + 1):
        if index not in hidden:
            shown.append(lines[index])
        elif index - 1 not in hidden:
            shown.append(" " * (len(lines[index]) - len(lines[index].lstrip())) + "...")
    if last < len(lines) - 1:
        shown.append(indent + "...")
    return "\n".join(shown)


def show_source(obj, start: str | None = None, end: str | None = None,
                skip: tuple[tuple[str, str], ...] = ()) -> None:
    """Print :func:`source_excerpt` of ``obj``: its signature and the lines from ``start`` to ``end``."""
    print(source_excerpt(obj, start, end, skip))
