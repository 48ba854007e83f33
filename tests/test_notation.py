"""One notation for the whole course: the card in docs/notation.md, and notebook 01's card, which shows its rows for
the core path (notebooks 01-06) word for word and links to docs/notation.md for the rest."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "| symbol | meaning | shape | in code |"
CARD = ROOT / "docs" / "notation.md"


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


def test_notebook_01_shows_the_cards_rows_for_the_core_path():
    nb = json.loads((ROOT / "notebooks" / "01_dot_product_scores.ipynb").read_text(encoding="utf-8"))
    notebook_text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    full_card = _card(CARD.read_text(encoding="utf-8"))
    card = _card(notebook_text)
    assert len(card) >= 15 and len(full_card) > len(card)
    # The same header, then the card's rows in the card's order, none changed: the core path's symbols.
    assert card[:2] == full_card[:2]
    remaining = iter(full_card)
    assert all(row in remaining for row in card), "notebook 01's card: rows of docs/notation.md, word for word, in order"
    core = ["$T$", "$B$", r"$d_\text{in}$", "$x_i$", "$X$", "$W_q, W_k, W_v$", "$Q, K, V$", "$s_{ij}$, $S$",
            "$a_{ij}$, $A$", "$z_i$, $Z$", "$M$", "$p$", "$H$", r"$d_\text{head}$", "$W_o$"]
    for symbol in core:
        assert any(row.startswith(f"| {symbol} |") for row in card), f"notebook 01's card lacks {symbol}"
    assert "](../docs/notation.md)" in notebook_text, "notebook 01 must link to docs/notation.md for the full card"


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
