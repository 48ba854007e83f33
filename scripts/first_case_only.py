"""pytest plugin for the Colab-like stack (scripts/colab_stack.py): each test function runs once, with its first
parameter set.

The pinned suite runs every case. On the Colab-like stack the question is whether the code paths that touch the
packages whose versions differ there (matplotlib, ipywidgets, IPython, numpy) still work; the cases of one test
function go through the same calls with other sizes or states, so one case each answers it at a fraction of the time.
"""

from __future__ import annotations


def pytest_collection_modifyitems(config, items):
    seen: set[tuple[str, str]] = set()
    keep, drop = [], []
    for item in items:
        key = (item.nodeid.split("::", 1)[0], getattr(item, "originalname", None) or item.name)
        (drop if key in seen else keep).append(item)
        seen.add(key)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
