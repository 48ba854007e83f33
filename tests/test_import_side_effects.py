"""What importing the course's package does, each checked in a fresh Python process (so once, not once per drawing
path as in test_plotting_and_widgets.py: a new process does not inherit that choice)."""

import subprocess
import sys


def test_importing_helpers_has_no_side_effects():
    code = (
        "import sys, torch; before = torch.initial_seed(); import helpers; "
        "assert 'matplotlib' not in sys.modules and 'ipywidgets' not in sys.modules, 'heavy import'; "
        "assert torch.initial_seed() == before, 'seeded on import'; print('clean')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "clean"


def test_environment_variable_forces_plain_agg(monkeypatch):
    from helpers import _text_cache

    _text_cache.use_text_cache(None)
    monkeypatch.setenv("HELPERS_TEXT_CACHE", "off")
    assert _text_cache.text_cache_status() == (False, "off: HELPERS_TEXT_CACHE=off")
    code = ("import matplotlib; matplotlib.use('agg'); from helpers.widgets import LiveFigure; "
            "from helpers import _text_cache; print(_text_cache.text_cache_status()[0])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
