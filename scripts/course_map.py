"""Keep the "Course map" line at the top of every notebook in step with the list of notebooks.

Each notebook's first cell holds one line ``**Course map:** 01 scores → 02 ... → **NN this one** → ...`` that
lists every lesson in order and bolds the current one. The short titles live here, once.
``python3 scripts/course_map.py --write`` rewrites the line in every notebook; ``--check`` only reports.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHORT_TITLES = {
    "01": "scores",
    "02": "softmax & context vectors",
    "03": "trainable Q/K/V",
    "04": "causal masks",
    "05": "dropout",
    "06": "multi-head attention",
    "07": "efficient attention",
    "08": "watch attention learn",
    "09": "positions",
    "10": "cross-attention",
    "11": "generation: KV cache, GQA, windows",
    "12": "two layers: induction heads, sinks",
    "13": "a real model: MiniLM's heads",
    "14": "large models: MLA, cache sizes, linear attention",
}
LINE = re.compile(r"^\*\*Course map:\*\*.*$", re.M)


def course_map_line(current: str) -> str:
    parts = [f"{number} {title}" for number, title in SHORT_TITLES.items()]
    return "**Course map:** " + " → ".join(f"**{p}**" if p.startswith(current + " ") else p for p in parts)


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the line where it differs")
    parser.add_argument("--check", action="store_true", help="only report notebooks whose line differs")
    args = parser.parse_args(argv)
    stale = []
    for path in notebooks():
        number = path.name[:2]
        if number not in SHORT_TITLES:
            stale.append(f"{path.name}: no short title in scripts/course_map.py")
            continue
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        first = nb["cells"][0]
        source = "".join(first["source"])
        wanted = course_map_line(number)
        found = LINE.search(source)
        if found and found.group(0) == wanted:
            continue
        stale.append(path.name)
        if args.write and found:
            new = source[:found.start()] + wanted + source[found.end():]
            first["source"] = new.splitlines(keepends=True)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name in stale:
        print(("rewrote " if args.write else "stale: ") + name)
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
