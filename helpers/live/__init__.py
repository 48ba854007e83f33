"""The live pictures of each lesson: the figure, its controls and its redraw, one module per notebook.

A lesson cell shows the idea and one call, e.g. ``score_explorer(inputs, tokens)`` from
``helpers.live.lesson01``; the plumbing (which builders, which sliders, what changes on a move) lives here.
Built on :mod:`helpers.plotting` and :mod:`helpers.widgets`; imports matplotlib and ipywidgets.
"""
