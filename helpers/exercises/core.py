"""The checker behind every exercise: run the learner's function, compare, explain the first problem.

A :class:`FunctionExercise` asks the learner to write a function. :meth:`~FunctionExercise.check`
calls it on fresh inputs drawn from a fixed seed (so the feedback is the same every run),
including edge cases, and compares each result with a reference from the course's canonical
code. It stops at the first problem and says what it is, most basic first:

1. the function is still the placeholder (``raise NotImplementedError``): "not done yet" and a hint;
2. it raised an error: which error, on which inputs;
3. its result matches a *known mistake* (e.g. softmax over the wrong dimension): that mistake is named;
4. it returned the wrong kind of thing, or a tensor of the wrong shape, or the wrong dtype;
5. it returned ``nan`` where the answer is a number;
6. it reads a tensor or number from the notebook's globals, or returned the same values for
   different inputs: it is not computing from its own arguments;
7. otherwise, the first position that differs, with both values.

An exercise may state rules about *how* to compute (``rules=``): :func:`no_loops` (no Python loop or
comprehension), :func:`forbids` (a call the task rules out, e.g. ``torch.softmax`` when you write your own) and
:func:`requires` (a call the task asks for). Every instruction an exercise states is checked this way: a right
value computed the forbidden way is still wrong, and the message says which rule was broken.

A rule that is not about a named call can still be written with the call-watching: subclass :class:`Rule`, name
the calls in ``watch`` and judge them in ``after``. :func:`no_reseeding` is one ready-made: "do not reseed the
global random generator" (``torch.manual_seed``, ``torch.random.manual_seed``, ``torch.seed``,
``helpers.device.seed_everything``, Python's ``random.seed`` and ``numpy.random.seed`` are watched; a
``torch.Generator`` of the learner's own, seeded with ``Generator.manual_seed``, stays allowed). Use it where a fix
that reseeds inside training or inside a forward pass would otherwise pass, e.g.
``rules=[no_reseeding(why="Hand the function a torch.Generator instead.")]``. State every rule in the task's text.

Every comparison survives ``inf``, ``-inf`` and ``nan`` on either side (the first differing position is found
with ``torch.isclose``, which treats an infinity as equal only to the same infinity), and an answer the checker
cannot even compare (an object whose ``==`` raises, a ``properties`` judge that trips over it) gets a message,
never a traceback. tests/test_exercises.py throws such answers at every exercise of the course.

Besides its feedback, ``check`` keeps two small records, both local files and nothing else:

* progress: in a Jupyter kernel, each *passed* exercise is written to ``attention-course-progress.json`` in the
  kernel's working folder (the notebooks' folder), which the learner can see and delete;
  :func:`helpers.exercises.progress` prints it. ``ATTENTION_COURSE_PROGRESS=off`` turns it off, any other value is
  the file's path. See :mod:`helpers.exercises.records`.
* a record for scripts that run notebooks: when ``ATTENTION_COURSE_GRADE_RECORD`` names a file, every check appends
  one JSON line (exercise, status, message) to it, and progress is not written. ``scripts/grade.py`` does not
  trust it for marks: it runs each checker again itself, outside the student's notebook.

An instructor's copy of the package may withhold the model answers (``scripts/withhold_solutions.py``): then
:meth:`FunctionExercise.solution` prints one sentence instead of the code. Checkers never need the model answers:
``reference`` is the course's canonical code.

Hints are given only when asked for (``.hint()``), one nudge at a time; the feedback of ``check`` never
contains them.

A :class:`SpotTheBug` is an exercise that starts from buggy code (shown by :meth:`SpotTheBug.show`);
the bug itself is one of its known mistakes, so handing it in unchanged names the bug.
Exercises whose answer is random (dropout) pass ``properties``: after the shape and dtype
checks against the reference, that function judges the answer by what must hold for any draw
(which values may appear, their scale, the fraction dropped) instead of comparing values.
"""

from __future__ import annotations

import contextlib
import dis
import importlib
import inspect
import math
import re
import textwrap
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

__all__ = ["Case", "Mistake", "Feedback", "FunctionExercise", "SpotTheBug", "Rule", "no_loops", "forbids", "requires",
           "no_reseeding", "SOLUTIONS_WITHHELD"]

# True in an instructor's copy built by scripts/withhold_solutions.py (it rewrites this line): solution() then
# prints WITHHELD_MESSAGE instead of a model answer.
SOLUTIONS_WITHHELD = False
WITHHELD_MESSAGE = ("Your instructor has withheld the model answers in this copy of the course: the checker's "
                    "messages and .hint() are there to help you, and your instructor can show you an answer later.")


@dataclass
class Case:
    """One set of inputs: ``fn(*args, **kwargs)``, described in words for the feedback."""

    description: str
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def fresh_args(self) -> tuple[tuple, dict]:
        """Copies of the inputs, so a function that changes its inputs in place cannot spoil the next call."""
        def copy(value):
            return value.clone() if isinstance(value, torch.Tensor) else value
        return tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()}

    def after_call(self, args: tuple, kwargs: dict) -> str | None:
        """What the learner's call did wrong that its result cannot show, or None; ``args`` and ``kwargs`` are the
        inputs it was given (from :meth:`fresh_args`). The default observes nothing; a case whose task states a
        contract (inputs left unchanged, a function called exactly n times) overrides it."""
        return None


@dataclass
class Mistake:
    """A known wrong answer, written as code, and what to tell a learner whose output matches it."""

    function: Callable
    message: str


class Feedback:
    """What :meth:`FunctionExercise.check` found. Truthy only when the answer is right.

    ``status`` is ``"correct"``, ``"not done"`` or ``"wrong"``; the notebook shows ``message``.
    """

    def __init__(self, status: str, message: str):
        self.status, self.message = status, message

    @property
    def passed(self) -> bool:
        return self.status == "correct"

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} ({value.dtype})"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _values_equal(answer, right) -> bool:
    """``answer == right`` for values that are not tensors, without ever raising.

    Floats compare with a tolerance (nan equals nan, an infinity only itself); tuples and lists element by element;
    anything whose ``==`` raises or gives no clear True/False is simply not equal.
    """
    if isinstance(answer, torch.Tensor) or isinstance(right, torch.Tensor):
        return False
    if isinstance(right, (tuple, list)):
        return (isinstance(answer, (tuple, list)) and len(answer) == len(right)
                and all(_values_equal(a, b) for a, b in zip(answer, right)))
    if isinstance(right, float) and isinstance(answer, (int, float)) and not isinstance(answer, bool):
        if math.isnan(right) or math.isnan(answer):
            return math.isnan(right) and math.isnan(answer)
        return math.isclose(answer, right, rel_tol=1e-6, abs_tol=1e-9)
    try:
        return bool(answer == right)
    except Exception:  # an array's elementwise ==, an object whose == raises
        return False


def _position_text(index: tuple[int, ...]) -> str:
    if len(index) == 0:
        return "the one value"
    if len(index) == 2:
        return f"row {index[0]}, column {index[1]}"
    if len(index) == 1:
        return f"position {index[0]}"
    return "index [" + ", ".join(map(str, index)) + "]"


def _globals_read(function) -> list[str]:
    """Names of tensors or numbers that ``function`` reads from its module's globals (the notebook)."""
    code, namespace = getattr(function, "__code__", None), getattr(function, "__globals__", {})
    if code is None:
        return []
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    return sorted(name for name in names if isinstance(namespace.get(name), (torch.Tensor, int, float))
                  and not isinstance(namespace.get(name), bool))


# --- rules: how the answer may be computed ------------------------------------------------------------------
def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every code object nested in it (comprehensions, inner functions, lambdas)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _loop_kind(function) -> str | None:
    """``"for"`` or ``"while"`` (or a comprehension) if ``function``'s bytecode loops, else ``None``."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    for inner in _code_objects(code):
        if inner.co_name in ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"):
            return "a comprehension (" + inner.co_name.strip("<>") + ")"
        names = {ins.opname for ins in dis.get_instructions(inner)}
        if "FOR_ITER" in names:
            return "a `for` loop or a comprehension"
        if any("BACKWARD" in name for name in names) or "JUMP_ABSOLUTE" in names:
            return "a `while` loop"
    return None


def _resolve(dotted: str) -> tuple[object, str, object]:
    """``"torch.nn.functional.softmax"`` -> (the module or class that holds it, attribute name, the object)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:-1]:
                owner = getattr(owner, part)
            return owner, parts[-1], getattr(owner, parts[-1])
        except AttributeError:
            break
    raise ValueError(f"cannot find {dotted!r}: give a full dotted name such as 'torch.softmax'")


def _watching(dotted_names: Sequence[str], namespace: dict, calls: list[str]):
    """While active, every call of one of ``dotted_names`` is appended to ``calls`` (and still runs).

    Also catches the learner's own aliases: a name in ``namespace`` (the notebook's globals) bound to the same
    object, as after ``from torch.nn.functional import softmax``.
    """
    replacements = []
    for dotted in dotted_names:
        owner, attribute, original = _resolve(dotted)

        def recorder(*args, __original=original, __name=dotted, **kwargs):
            calls.append(__name)
            return __original(*args, **kwargs)

        replacements.append((owner, attribute, recorder))
    return _replacing(replacements, namespace)


@contextlib.contextmanager
def _replacing(replacements: Sequence[tuple[object, str, object]], namespace: dict) -> Iterator[None]:
    """While active, ``owner.attribute`` is ``replacement`` for each triple, and so is every name in ``namespace``
    bound to the original (the learner's own aliases); everything is put back afterwards, in reverse order."""
    undo: list[tuple[object, str, object]] = []
    try:
        for owner, attribute, replacement in replacements:
            original = getattr(owner, attribute)
            undo.append((owner, attribute, original))
            setattr(owner, attribute, replacement)
            for key, value in list(namespace.items()):
                if value is original:
                    undo.append((namespace, key, original))
                    namespace[key] = replacement
        yield
    finally:
        for owner, attribute, original in reversed(undo):
            if isinstance(owner, dict):
                owner[attribute] = original
            else:
                setattr(owner, attribute, original)


class Rule:
    """An instruction about how to compute the answer, checked on the learner's function.

    ``before(function)`` looks at the function without running it; ``watch`` names the calls to record
    while it runs; ``after(calls)`` judges the calls recorded during one run. Each returns a problem in
    words, or ``None``.
    """

    watch: tuple[str, ...] = ()

    def before(self, function) -> str | None:
        return None

    def after(self, calls: list[str]) -> str | None:
        return None


class _NoLoops(Rule):
    def before(self, function) -> str | None:
        kind = _loop_kind(function)
        if kind:
            return (f"the task asks for no Python loop, and your function uses {kind}. Let one tensor operation "
                    f"work on every row at once.")
        return None

    def __repr__(self) -> str:
        return "no_loops()"


class _Forbids(Rule):
    def __init__(self, names: tuple[str, ...], why: str):
        self.watch, self.why = names, why

    def after(self, calls: list[str]) -> str | None:
        used = [name for name in calls if name in self.watch]  # in call order: the learner's own call first
        if used:
            return f"the task asks you not to call {' or '.join(f'`{n}`' for n in self.watch)}, and your " \
                   f"function calls `{used[0]}`. {self.why}".rstrip()
        return None

    def __repr__(self) -> str:
        return f"forbids{self.watch!r}"


class _Requires(Rule):
    def __init__(self, names: tuple[str, ...], why: str):
        self.watch, self.why = names, why

    def after(self, calls: list[str]) -> str | None:
        if not any(name in calls for name in self.watch):
            return f"the task asks you to use {' or '.join(f'`{n}`' for n in self.watch)}, and your function " \
                   f"never calls it. {self.why}".rstrip()
        return None

    def __repr__(self) -> str:
        return f"requires{self.watch!r}"


class _NoReseeding(_Forbids):
    """Forbids the calls that reseed a global random generator (see :func:`no_reseeding`)."""

    NAMES = ("torch.manual_seed", "torch.random.manual_seed", "torch.seed", "torch.random.seed",
             "helpers.device.seed_everything", "random.seed", "numpy.random.seed")

    def __init__(self, why: str):
        names = []
        for name in self.NAMES:
            try:
                _resolve(name)
            except (ValueError, ImportError):  # numpy missing, say: nothing to watch there
                continue
            names.append(name)
        super().__init__(tuple(names), why)

    def after(self, calls: list[str]) -> str | None:
        used = [name for name in calls if name in self.watch]
        if used:
            return (f"the task asks you not to reseed the global random generator, and your function calls "
                    f"`{used[0]}`. {self.why}").rstrip()
        return None

    def __repr__(self) -> str:
        return "no_reseeding()"


def _names(names: tuple[str, ...], what: str) -> tuple[str, ...]:
    if not names or not all(isinstance(n, str) and "." in n for n in names):
        raise ValueError(f"{what} takes one or more dotted names such as 'torch.softmax', got {names!r}")
    for name in names:
        _resolve(name)  # a typo in a rule is the course's bug: fail when the exercise is defined
    return names


def no_loops() -> Rule:
    """Rule: no ``for``/``while`` loop and no comprehension in the learner's function."""
    return _NoLoops()


def forbids(*names: str, why: str = "") -> Rule:
    """Rule: the learner's function must not call any of ``names`` (dotted, e.g. ``"torch.softmax"``)."""
    return _Forbids(_names(names, "forbids"), why)


def requires(*names: str, why: str = "") -> Rule:
    """Rule: the learner's function must call at least one of ``names`` on every input."""
    return _Requires(_names(names, "requires"), why)


def no_reseeding(why: str = "") -> Rule:
    """Rule: the learner's function must not reseed a global generator (``torch.manual_seed``,
    ``helpers.device.seed_everything``, ``random.seed``, ...). Their own ``torch.Generator`` stays allowed."""
    return _NoReseeding(why)


class FunctionExercise:
    """An exercise whose answer is a function.

    Args:
        title: short name used in every message.
        task: one sentence saying what the function must do (shown by :meth:`describe`).
        reference: the right answer, usually the course's canonical helper; called with the same inputs.
        cases: ``cases(generator) -> list[Case]``; the generator is seeded with ``seed`` on every check.
        hint: a nudge tied to the lesson, or a list of nudges, each a little more precise; ``.hint()`` shows
            the next one. A hint never contains the answer (that is what ``.solution()`` is for).
        solution: a function written the way a learner would; :meth:`solution` prints its source.
        mistakes: known wrong answers, each with the message that names the problem.
        atol, rtol: tolerances for the value comparison.
        seed: seed of the inputs.
        properties: for random answers, ``properties(got, case, function) -> problem or None`` replaces the
            value comparison (``got`` is the learner's result, ``case`` holds the inputs, ``function`` may be
            called again, e.g. to see that a second draw differs).
        rules: instructions about how to compute the answer (:func:`no_loops`, :func:`forbids`,
            :func:`requires`); breaking one makes the answer wrong even when its values are right.
        name: how the notebook reaches this exercise (e.g. ``"lesson02.stable_softmax"``), used in the message
            that points to ``.hint()``; the lesson package sets it.
    """

    def __init__(self, title: str, task: str, reference: Callable, cases: Callable[[torch.Generator], list[Case]],
                 hint: str | Sequence[str], solution: Callable, mistakes: Sequence[Mistake] = (), *,
                 atol: float = 1e-5, rtol: float = 1e-4, seed: int = 0,
                 properties: Callable[[object, Case, Callable], str | None] | None = None,
                 rules: Sequence[Rule] = (), name: str = "", answer_name: str = ""):
        for arg, value in (("reference", reference), ("cases", cases), ("solution", solution)):
            if not callable(value):
                raise TypeError(f"{arg} must be callable, got {type(value).__name__}")
        hints = [hint] if isinstance(hint, str) else list(hint)
        if not hints or not all(isinstance(h, str) and h.strip() for h in hints):
            raise TypeError("hint must be a non-empty string or a list of them")
        if not all(isinstance(rule, Rule) for rule in rules):
            raise TypeError("rules must be made by no_loops(), forbids(...), requires(...), no_reseeding() or be a "
                            "subclass of Rule")
        self.title, self.task, self.reference, self.cases = title, task, reference, cases
        self._hints, self._hints_shown, self._solution, self.mistakes = hints, 0, solution, list(mistakes)
        self.atol, self.rtol, self.seed, self.properties = atol, rtol, seed, properties
        self.rules, self.name = list(rules), name
        self._default_name = answer_name or re.sub(r"^_solution_", "", solution.__name__)
        self._answer_name = ""   # the name of the learner's last checked function: solution() prints under it

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.title!r})"

    # --- what the learner calls -------------------------------------------------------------
    def describe(self) -> None:
        """Print the task."""
        print(f"{self.title}: {self.task}")

    def hint(self) -> None:
        """Print the next nudge towards the answer (each call one more, then the last one again)."""
        index = min(self._hints_shown, len(self._hints) - 1)
        self._hints_shown += 1
        count = f" {index + 1} of {len(self._hints)}" if len(self._hints) > 1 else ""
        print(f"Hint{count} ({self.title}): {self._hints[index]}")

    def solution(self) -> None:
        """Print a model answer. Try first: the checker tells you what is wrong, step by step."""
        if SOLUTIONS_WITHHELD:
            print(WITHHELD_MESSAGE)
            return
        print(f"A model answer for {self.title}:\n")
        print(self._solution_source())

    def _solution_source(self, name: str = "") -> str:
        """The model answer's source under ``name``; by default under the name of the learner's own function or class
        once a check has seen it (so that it can replace the learner's cell as it is), else the name the task asks
        for."""
        source = textwrap.dedent(inspect.getsource(self._solution)).rstrip()
        own = self._solution.__name__
        name = name or self._answer_name or self._default_name
        return re.sub(rf"^(def|class) {re.escape(own)}\b", lambda match: f"{match.group(1)} {name}", source, count=1)

    def check(self, function) -> Feedback:
        """Run ``function`` on every case and report the first problem, or that it is correct.

        Checking never moves the learner's random stream: the next ``torch.rand`` after a check draws what it
        would have drawn without it (the whole check runs on a fork of the CPU generator).
        """
        name = getattr(function, "__name__", "")
        if isinstance(name, str) and name.isidentifier() and not name.startswith("_"):   # not "<lambda>", not ours
            self._answer_name = name
        with torch.random.fork_rng(devices=[]):
            feedback = self._check(function)
        from . import records  # a small module of its own: the checks write through it
        note = records.record(self.name or self.title, feedback)
        if note:
            feedback.message += note
        return feedback

    def _check(self, function) -> Feedback:
        if not callable(function):
            return self._wrong(f"expected a function, got {_describe(function)}. Pass the function itself "
                               f"(its name, without brackets).")
        cases = self.cases(torch.Generator().manual_seed(self.seed))
        previous: list[tuple[Case, tuple, tuple]] = []
        for rule in self.rules:
            problem = rule.before(function)
            if problem and not self._is_placeholder(function):
                return self._wrong(problem)
        watched = tuple(dict.fromkeys(name for rule in self.rules for name in rule.watch))
        namespace = getattr(function, "__globals__", {})
        for case in cases:
            args, kwargs = case.fresh_args()
            args_given, kwargs_given = args, kwargs   # for case.after_call: what the learner's call was handed
            calls: list[str] = []
            try:
                with _watching(watched, namespace, calls):
                    got = function(*args, **kwargs)
            except NotImplementedError:
                return Feedback("not done", f"⏳ {self.title}: not done yet. Replace the line "
                                            f"`raise NotImplementedError` with your code and run the cell again."
                                            f"{self._ask_for_hint()}")
            except Exception as error:  # the learner's code failed: say where, not a traceback
                return self._wrong(f"on {case.description}, your function raised "
                                   f"{type(error).__name__}: {error}")
            args, kwargs = case.fresh_args()
            with torch.random.fork_rng(devices=[]):  # a random reference must not move the learner's stream
                expected = self.reference(*args, **kwargs)
            try:
                problem = self._shape_of_return(got, expected) or self._compare(
                    _as_tuple(got), _as_tuple(expected), case, previous, function)
            except Exception as error:  # an answer too odd to compare: say so, never a traceback
                problem = (f"your answer could not be compared with the expected one ({type(error).__name__}: "
                           f"{error}). Expected {self._expected_text(expected)}, got {self._expected_text(got)}.")
            if problem:
                return self._wrong(f"on {case.description}, {problem}")
            for rule in self.rules:
                problem = rule.after(calls)
                if problem:
                    return self._wrong(f"the values are right, but {problem}")
            problem = case.after_call(args_given, kwargs_given)
            if problem:
                return self._wrong(f"on {case.description}, the values are right, but {problem}")
            previous.append((case, _as_tuple(got), _as_tuple(expected)))
        return Feedback("correct", f"✅ {self.title}: correct on all {len(cases)} test inputs "
                                   f"({', '.join(c.description for c in cases)}).")

    # --- comparison ---------------------------------------------------------------------------
    @staticmethod
    def _expected_text(value) -> str:
        if isinstance(value, tuple):
            return "(" + ", ".join(_describe(v) for v in value) + ")"
        return _describe(value)

    def _ask_for_hint(self) -> str:
        if self.name:
            return f"\n   Stuck? `{self.name}.hint()` gives a nudge."
        return "\n   Stuck? Call `.hint()` on this exercise for a nudge."

    def _wrong(self, problem: str) -> Feedback:
        return Feedback("wrong", f"❌ {self.title}: {problem}{self._ask_for_hint()}")

    @staticmethod
    def _is_placeholder(function) -> bool:
        code = getattr(function, "__code__", None)
        return code is not None and "NotImplementedError" in code.co_names

    @staticmethod
    def _shape_of_return(got, expected) -> str | None:
        """A precise message when the answer is packed differently: a list for a tuple, a list for a tensor."""
        if isinstance(expected, tuple) and isinstance(got, list) and len(got) == len(expected):
            return (f"your function returned a list of {len(got)} values; return them as a tuple, "
                    f"`return a, b` (a list is one value).")
        if isinstance(expected, torch.Tensor) and isinstance(got, (list, tuple)) and not isinstance(got, torch.Size):
            if got:
                return (f"your function returned a {type(got).__name__} of {len(got)} items, expected one tensor "
                        f"of shape {tuple(expected.shape)}. Build the tensor itself (torch.stack or torch.tensor), "
                        f"or better, compute it with one tensor operation.")
        return None

    def _compare(self, got: tuple, expected: tuple, case: Case, previous, function) -> str | None:
        if self._all_close(got, expected):
            return None
        # A known mistake is named before anything else: its message is the most precise one we have. Unless the
        # function reads a number from the notebook and the mistake does not explain its earlier answers: dividing
        # by a global `scale = 4` is right where d_k = 16 and looks like "divided by d_k" where d_k = 4, yet the
        # global is what is wrong (named below).
        outside = _globals_read(function)
        for mistake in self.mistakes:
            if self._matches(mistake, got, case) and (not outside or self._explains_earlier(mistake, previous)):
                return mistake.message
        if len(got) != len(expected):
            return f"your function returned {len(got)} value(s), expected {len(expected)}."
        for position, (answer, right) in enumerate(zip(got, expected)):
            which = f"returned value {position} (counting from 0): " if len(expected) > 1 else ""
            problem = self._compare_one(answer, right)
            if problem:
                return which + problem
        if self.properties is not None:
            return self.properties(got if len(got) > 1 else got[0], case, function)
        if outside:
            names = ", ".join(f"`{name}`" for name in outside)
            return (f"the values are wrong, and your function reads {names} from outside it (a global of the "
                    f"notebook). Use its arguments and the values it computes itself instead.")
        repeat = self._same_as_before(got, expected, previous)
        if repeat:
            return repeat
        return self._first_difference(got, expected)

    def _compare_one(self, answer, right) -> str | None:
        if not isinstance(right, torch.Tensor):
            if isinstance(answer, torch.Tensor) or not isinstance(answer, type(right)):
                return f"expected {_describe(right)}, got {_describe(answer)}."
            return None
        if not isinstance(answer, torch.Tensor):
            return f"expected {_describe(right)}, got {_describe(answer)}."
        if answer.is_complex() and not right.is_complex():
            return f"your result has dtype {answer.dtype}, expected {right.dtype}."
        if answer.shape != right.shape:
            return (f"your result has shape {tuple(answer.shape)}, the expected shape is {tuple(right.shape)}. "
                    f"Check which dimensions you multiply, sum or keep.")
        if (answer.dtype == torch.bool) != (right.dtype == torch.bool):
            return f"your result has dtype {answer.dtype}, expected {right.dtype}."
        if right.dtype != torch.bool:
            answer = answer.detach().to("cpu", torch.float64)
            right = right.detach().to("cpu", torch.float64)
            bad = torch.isnan(answer) & ~torch.isnan(right)
            if bool(bad.any()):
                index = tuple(int(i) for i in bad.nonzero()[0])
                return (f"your result is nan at {_position_text(index)} where the answer is "
                        f"{float(right[index]):.4f}. nan usually comes from inf - inf or 0/0 (e.g. exp overflow, "
                        f"or a softmax over a row that is all -inf).")
        return None

    def _close(self, answer: torch.Tensor, right: torch.Tensor) -> bool:
        if (right.dtype == torch.bool) != (answer.dtype == torch.bool):
            return False
        if right.dtype == torch.bool:
            return answer.shape == right.shape and bool(torch.equal(answer.cpu(), right.cpu()))
        if answer.is_complex() != right.is_complex():
            return False
        answer = answer.detach().to("cpu", torch.float64)
        right = right.detach().to("cpu", torch.float64)
        return answer.shape == right.shape and bool(torch.allclose(answer, right, rtol=self.rtol, atol=self.atol,
                                                                    equal_nan=True))

    def _all_close(self, got: tuple, expected: tuple) -> bool:
        if len(got) != len(expected):
            return False
        return all(isinstance(a, torch.Tensor) and self._close(a, b) if isinstance(b, torch.Tensor)
                   else _values_equal(a, b) for a, b in zip(got, expected))

    def _same_as_before(self, got: tuple, expected: tuple, previous) -> str | None:
        for earlier_case, earlier_got, earlier_expected in previous:
            if self._all_close(got, earlier_got) and not self._all_close(expected, earlier_expected):
                return (f"your function returned exactly what it returned for {earlier_case.description}, "
                        f"although the inputs differ. Does it read a variable from the notebook (a global) "
                        f"instead of its own arguments or the values it just computed?")
        return None

    def _matches(self, mistake: Mistake, got: tuple, case: Case) -> bool:
        args, kwargs = case.fresh_args()
        try:
            wrong = _as_tuple(mistake.function(*args, **kwargs))
        except Exception:  # a mistake that crashes on this case cannot be what the learner wrote
            return False
        return len(wrong) == len(got) and self._all_close(got, wrong)

    def _explains_earlier(self, mistake: Mistake, previous) -> bool:
        """Whether ``mistake`` gives the learner's answers to every earlier input too (always, for random answers)."""
        if self.properties is not None:  # a random answer is judged by its properties, draw by draw
            return True
        return all(self._matches(mistake, earlier_got, earlier_case) for earlier_case, earlier_got, _ in previous)

    def _first_difference(self, got: tuple, expected: tuple) -> str:
        for position, (answer, right) in enumerate(zip(got, expected)):
            which = f" of returned value {position} (counting from 0)" if len(expected) > 1 else ""
            if not isinstance(right, torch.Tensor):
                if not _values_equal(answer, right):
                    shown = repr(answer)
                    shown = shown if len(shown) <= 80 else shown[:77] + "..."
                    return f"you returned {shown}{which}, expected {right!r}."
                continue
            if not isinstance(answer, torch.Tensor) or answer.shape != right.shape:
                return f"expected {_describe(right)}{which}, got {_describe(answer)}."
            if self._close(answer, right):
                continue
            if right.dtype == torch.bool:
                far = answer.detach().cpu().bool() != right.detach().cpu()
            else:
                # isclose, not |a - r| > tol: with r = -inf and a finite, both sides of that test are inf.
                a64, r64 = answer.detach().to("cpu", torch.float64), right.detach().to("cpu", torch.float64)
                far = ~torch.isclose(a64, r64, rtol=self.rtol, atol=self.atol, equal_nan=True)
            if not bool(far.any()):
                continue
            index = tuple(int(i) for i in far.nonzero()[0])
            value, want = answer[index].item(), right[index].item()
            shown = (lambda v: repr(v)) if right.dtype == torch.bool else (lambda v: f"{v:.4f}")
            return (f"the shape is right but the values are not: at {_position_text(index)}{which} you have "
                    f"{shown(value)}, the answer is {shown(want)}.")
        return "the values differ from the answer."  # only reachable if tolerances disagree


class SpotTheBug(FunctionExercise):
    """An exercise that starts from buggy code: find the bug, write the fixed function.

    Args:
        buggy: the buggy function (also added as the first known mistake, with ``bug_message``).
        bug_message: what the checker says when the learner's function still has that bug.
        Everything else as :class:`FunctionExercise`.
    """

    def __init__(self, title: str, task: str, reference: Callable, cases, hint, solution: Callable,
                 buggy: Callable, bug_message: str, mistakes: Sequence[Mistake] = (), **options):
        super().__init__(title, task, reference, cases, hint, solution,
                         [Mistake(buggy, bug_message), *mistakes], **options)
        self.buggy = buggy

    def show(self) -> None:
        """Print the buggy code to start from."""
        print(f"{self.title}: this code runs without an error, yet its answer is wrong.\n")
        print(textwrap.dedent(inspect.getsource(self.buggy)).rstrip())
