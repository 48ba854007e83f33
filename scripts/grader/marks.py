"""Points, the class table, the CSV, the feedback files; and keeping the grader's secrets out of all of them.

The points file (``--points points.toml`` or ``points.json``), every key optional::

    default = 1                  # points of an exercise not named below
    partial_credit = true        # a failed exercise earns its share of the test inputs it gets right

    [exercises]
    "lesson04.influence" = 2
    "lesson04.axis_leak" = { points = 3, partial_credit = false }

The same as JSON: ``{"default": 1, "partial_credit": true, "exercises": {"lesson04.influence": 2}}``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

PASSED, PARTLY, FAILED, NOT_ATTEMPTED = "passed", "partly passed", "failed", "not attempted"
ERROR, TIME_LIMIT, TAMPERED = "error", "time limit reached", "tampered"
SAFE_VARIABLES = {"PATH", "HOME", "PWD", "OLDPWD", "SHELL", "LANG", "LANGUAGE", "TERM", "USER", "LOGNAME", "SHLVL",
                  "HOSTNAME", "TMPDIR", "TZ", "CI", "PYTHONPATH", "VIRTUAL_ENV", "MAKELEVEL", "MAKEFLAGS", "MFLAGS",
                  "_", "DISPLAY", "COLUMNS", "LINES", "EDITOR", "PAGER"}


@dataclass
class Points:
    default: float = 1.0
    partial_credit: bool = True
    exercises: dict[str, tuple[float, bool]] = field(default_factory=dict)

    def of(self, exercise: str) -> tuple[float, bool]:
        return self.exercises.get(exercise, (self.default, self.partial_credit))

    @classmethod
    def load(cls, path: Path | None) -> Points:
        if path is None:
            return cls()
        if path.suffix.lower() not in (".json", ".toml"):
            raise ValueError(f"points file {path}: expected a .toml or .json file")
        text = Path(path).read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        elif path.suffix.lower() == ".toml":
            import tomllib
            data = tomllib.loads(text)
        else:
            raise ValueError(f"points file {path}: expected a .toml or .json file")
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: dict, where: str = "points") -> Points:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a table of settings, got {type(data).__name__}")
        unknown = set(data) - {"default", "partial_credit", "exercises"}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; expected default, partial_credit, "
                             f"exercises")
        points = cls(_number(data.get("default", 1), f"{where}: default"),
                     _flag(data.get("partial_credit", True), f"{where}: partial_credit"))
        exercises = data.get("exercises", {})
        if not isinstance(exercises, dict):
            raise ValueError(f"{where}: exercises must be a table of \"lessonNN.name\" = points")
        for name, value in exercises.items():
            if not re.fullmatch(r"lesson\d\d\.\w+", name):
                raise ValueError(f"{where}: exercise {name!r} is not a name like \"lesson04.influence\"")
            if isinstance(value, dict):
                extra = set(value) - {"points", "partial_credit"}
                if extra:
                    raise ValueError(f"{where}: {name}: unknown key(s) {sorted(extra)}; expected points, "
                                     f"partial_credit")
                points.exercises[name] = (_number(value.get("points", points.default), f"{where}: {name}.points"),
                                          _flag(value.get("partial_credit", points.partial_credit),
                                                f"{where}: {name}.partial_credit"))
            else:
                points.exercises[name] = (_number(value, f"{where}: {name}"), points.partial_credit)
        return points


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}: expected a number of points >= 0, got {value!r}")
    return float(value)


def _flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what}: expected true or false, got {value!r}")
    return value


@dataclass
class Result:
    """One exercise of one submission."""

    exercise: str
    verdict: str
    message: str = ""
    points: float = 0.0
    max_points: float = 1.0
    parts: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)
    title: str = ""

    @property
    def short(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        first = re.sub(r"^(❌|✅|⏳)\s*", "", first)
        if self.title and first.startswith(self.title + ":"):
            first = first[len(self.title) + 1:]
        first = first.strip()
        if self.verdict in (PASSED, NOT_ATTEMPTED, TIME_LIMIT) or not first:
            return self.verdict
        return f"{self.verdict}: {first}"


@dataclass
class Outcome:
    """One submitted notebook."""

    student: str
    notebook: str
    lesson: str | None
    results: dict[str, Result] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0    # as the sandboxed processes report it (the notebook run and the checks)


def score(report: dict, points: float, partial: bool) -> tuple[str, float, tuple[int, int] | None]:
    """(verdict, points earned, parts) from a check runner's report."""
    status, parts = report.get("status"), report.get("parts")
    parts = tuple(parts) if isinstance(parts, list) and len(parts) == 2 and parts[1] else None
    if status == "correct":
        return PASSED, points, parts
    if status == "not done":
        return NOT_ATTEMPTED, 0.0, parts
    if status == "wrong":
        if partial and parts and parts[0]:
            return PARTLY, round(points * parts[0] / parts[1], 2), parts
        return FAILED, 0.0, parts
    if status == "time limit":
        return TIME_LIMIT, 0.0, None
    if status == "tampered":
        return TAMPERED, 0.0, None
    return ERROR, 0.0, None


class Redactor:
    """Hides the values of the grader's environment variables (tokens, passwords) in everything it writes."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.secrets = sorted({value for name, value in environ.items()
                               if name not in SAFE_VARIABLES and not name.startswith("LC_") and len(value) >= 6
                               and not re.fullmatch(r"[0-9.]+|true|false|yes|no|on|off", value, re.I)},
                              key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "[hidden]")
        return text


def _points_text(value: float) -> str:
    return f"{value:g}"


def students(outcomes: list[Outcome], course_order: list[str]) -> tuple[list[str], list[dict]]:
    """The exercises graded (columns, in course order) and one summary per student."""
    seen = {name for outcome in outcomes for name in outcome.results}
    columns = [name for name in course_order if name in seen] + sorted(seen - set(course_order))
    maxima = {}
    for outcome in outcomes:
        for name, result in outcome.results.items():
            maxima[name] = result.max_points
    rows: dict[str, dict] = {}
    for outcome in outcomes:
        row = rows.setdefault(outcome.student, {"student": outcome.student, "results": {}, "notebooks": [],
                                                "notes": []})
        row["notebooks"].append(outcome.notebook)
        row["notes"] += [f"{outcome.notebook}: {note}" for note in outcome.notes]
        for name, result in outcome.results.items():
            earlier = row["results"].get(name)
            if earlier is None or result.points > earlier.points:  # two notebooks of one lesson: the better one
                row["results"][name] = result
    for row in rows.values():
        row["total"] = sum(result.points for result in row["results"].values())
        row["max"] = sum(maxima[name] for name in columns)
    return columns, list(rows.values())


def write_csv(path: Path, columns: list[str], rows: list[dict], redact: Redactor) -> None:
    """One row per student: student, total, max, percent, then each exercise's points (empty: not submitted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "total", "max", "percent", *columns, "notebooks", "notes"])
        for row in rows:
            percent = 100 * row["total"] / row["max"] if row["max"] else 0.0
            writer.writerow([_cell(redact(row["student"])), _points_text(row["total"]), _points_text(row["max"]),
                             f"{percent:.1f}",
                             *[_points_text(row["results"][c].points) if c in row["results"] else "" for c in columns],
                             _cell(redact(" ".join(row["notebooks"]))), _cell(redact("; ".join(row["notes"]))[:1000])])


def _cell(text: str) -> str:
    """A CSV cell a spreadsheet will not run as a formula (a name starting with =, +, - or @)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def feedback_name(student: str) -> str:
    safe = re.sub(r"[^\w.-]+", "_", student).strip("._") or "student"
    return f"{safe}.md"


def write_feedback(folder: Path, outcomes: list[Outcome], columns: list[str], rows: list[dict],
                   redact: Redactor, preface: str) -> list[Path]:
    """A markdown file per student: per notebook, each exercise's verdict, points and the checker's message."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        lines = [f"# Feedback for {row['student']}", "",
                 f"Total: {_points_text(row['total'])} of {_points_text(row['max'])} points.", "", preface, ""]
        for outcome in (o for o in outcomes if o.student == row["student"]):
            lines += [f"## {outcome.notebook}", ""]
            for note in outcome.notes:
                lines.append(f"- Note: {note}")
            if outcome.notes:
                lines.append("")
            for name, result in outcome.results.items():
                parts = (f" ({result.parts[0]} of {result.parts[1]} test inputs right)"
                         if result.parts and result.verdict in (PARTLY, FAILED) else "")
                lines += [f"### {name}: {result.verdict}, {_points_text(result.points)} of "
                          f"{_points_text(result.max_points)} point(s){parts}", ""]
                if result.message.strip():
                    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", result.message)), default=0))
                    lines += [f"{fence}text", result.message.strip(), fence, ""]
                for note in result.notes:
                    lines += [f"- {note}"]
                if result.notes:
                    lines.append("")
        missing = [c for c in columns if c not in row["results"]]
        if missing:
            lines += ["## Not submitted", "", *[f"- {name}: 0 points" for name in missing], ""]
        path = folder / feedback_name(row["student"])
        path.write_text(redact("\n".join(lines)).rstrip() + "\n", encoding="utf-8")
        written.append(path)
    return written


def print_table(columns: list[str], rows: list[dict], redact: Redactor, width: int = 30) -> None:
    def short(text: str) -> str:
        return text if len(text) <= width else text[: width - 1] + "…"
    header = ["student", "total", *columns]
    body = [[row["student"], f"{_points_text(row['total'])}/{_points_text(row['max'])}",
             *[(f"{_points_text(row['results'][c].points)} {row['results'][c].short}" if c in row["results"]
                else "-") for c in columns]] for row in rows]
    shown = [[short(redact(cell)) for cell in line] for line in [header, *body]]
    widths = [max(len(line[i]) for line in shown) for i in range(len(header))]
    for number, line in enumerate(shown):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
        if number == 0:
            print("  ".join("-" * w for w in widths))
