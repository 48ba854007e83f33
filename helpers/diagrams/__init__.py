"""Schematic pictures of the data flow (boxes for tensors, arrows for operations), drawn by code.

Every diagram takes the sizes it shows as arguments (``num_tokens``, ``d_in``, ``num_heads``, ...), so a picture
can never disagree with the shapes the lesson computes. Each returns a :class:`helpers.plotting.CourseFigure`
that displays itself when a cell ends with it. ``helpers.diagrams._draw`` holds the few drawing primitives that
all diagrams share. Imports matplotlib; the core of ``helpers`` does not.

One module per picture; import the function you need, e.g.
``from helpers.diagrams.qkv_flow import qkv_flow_diagram``.
"""
