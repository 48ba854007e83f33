"""One notation for the whole course: notebook 01's notation card and the README's are the same table."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "| symbol | meaning | shape | in code |"


def _card(text: str) -> list[str]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == HEADER), None)
    assert start is not None, f"no notation card (a table headed {HEADER!r})"
    rows = []
    for line in lines[start:]:
        if not line.strip().startswith("|"):
            break
        rows.append(re.sub(r"\s+", " ", line.strip()))
    return rows


def test_readme_and_notebook_01_show_the_same_card():
    nb = json.loads((ROOT / "notebooks" / "01_dot_product_scores.ipynb").read_text(encoding="utf-8"))
    notebook_text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    readme_card = _card((ROOT / "README.md").read_text(encoding="utf-8"))
    assert _card(notebook_text) == readme_card
    assert len(readme_card) >= 15


def test_lessons_use_the_cards_symbols_for_scores_and_weights():
    """Scores are S, weights A, context vectors Z: the book's omega/alpha and a W for weights do not come back."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for index, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "markdown":
                continue
            text = "".join(cell["source"])
            found = re.search(r"\\(omega|Omega|alpha)\b", text)
            assert found is None, f"{path.name} cell {index}: {found.group(0)} (use s/S, a/A from the card)"
