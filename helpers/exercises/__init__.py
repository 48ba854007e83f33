"""Exercises with automatic checks, one module per notebook.

In a notebook::

    from helpers.exercises import lesson02
    lesson02.stable_softmax.describe()     # the task
    lesson02.stable_softmax.check(my_fn)   # run your function on test inputs, explain the first problem
    lesson02.stable_softmax.hint()         # a nudge (call again for the next one)
    lesson02.stable_softmax.solution()     # a model answer, only when you ask for it

    from helpers.exercises import progress
    progress()                             # which exercises you have passed (a local file; see .records)

The checkers live in :mod:`helpers.exercises.core`; the model answers live in the lesson
modules, away from the notebooks, so they are not seen by scrolling.
"""

from . import lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08, lesson09, lesson10, lesson11, lesson12, lesson13, lesson14
from .core import Case, Feedback, FunctionExercise, Mistake, Rule, SpotTheBug, forbids, no_loops, no_reseeding, requires
from .records import progress

__all__ = ["Case", "Feedback", "FunctionExercise", "Mistake", "SpotTheBug", "Rule", "no_loops", "forbids", "requires",
           "no_reseeding", "progress",
           "lesson01", "lesson02", "lesson03", "lesson04", "lesson05", "lesson06", "lesson07", "lesson08",
           "lesson09", "lesson10", "lesson11", "lesson12", "lesson13", "lesson14",
           "all_exercises"]


def all_exercises() -> dict[str, FunctionExercise]:
    """Every exercise of the course, as ``{"lesson02.stable_softmax": exercise}`` in course order."""
    found = {}
    for lesson in (lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08, lesson09, lesson10,
                   lesson11, lesson12, lesson13, lesson14):
        for name in lesson.__all__:
            found[f"{lesson.__name__.rsplit('.', 1)[1]}.{name}"] = getattr(lesson, name)
    return found


# Each exercise knows how the notebook reaches it, so its messages can say "lesson02.stable_softmax.hint()".
for _qualified, _exercise in all_exercises().items():
    if not _exercise.name:
        _exercise.name = _qualified
