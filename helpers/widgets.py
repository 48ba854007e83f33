"""Controls wired to a figure that redraws in place.

:class:`LiveFigure` shows ipywidgets controls above a ``widgets.Image``. Moving a
control calls your ``redraw(**values)``, which updates the figure's artists;
the figure is then rendered to PNG and swapped into the image. One picture,
updated in place: no flicker, no piling-up figures, and it works the same in
JupyterLab and under nbval (no ``Output`` widget routing).

When the notebook is read where widgets cannot run (GitHub, nbconvert), the
cell's stored output also carries a PNG of the picture as first drawn.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping

import ipywidgets as widgets
from matplotlib.figure import Figure

from .plotting import figure_to_png

__all__ = ["LiveFigure", "float_slider", "int_slider", "steps_slider", "choice"]

_STYLE = {"description_width": "initial"}
_LAYOUT = widgets.Layout(width="420px")


def float_slider(description: str, value: float, min: float, max: float, step: float,
                 readout_format: str = ".2f") -> widgets.FloatSlider:
    """A float slider whose description is never clipped."""
    return widgets.FloatSlider(value=value, min=min, max=max, step=step, description=description,
                               readout_format=readout_format, style=_STYLE, layout=_LAYOUT)


def int_slider(description: str, value: int, min: int, max: int, step: int = 1) -> widgets.IntSlider:
    """An int slider whose description is never clipped."""
    return widgets.IntSlider(value=value, min=min, max=max, step=step, description=description,
                             style=_STYLE, layout=_LAYOUT)


def steps_slider(description: str, options, value=None) -> widgets.SelectionSlider:
    """A slider over a few chosen values, e.g. powers of two for a dimension (one arrow key = one step)."""
    options = list(options)
    return widgets.SelectionSlider(options=options, value=options[0] if value is None else value,
                                   description=description, style=_STYLE, layout=_LAYOUT)


def choice(description: str, options, value=None) -> widgets.ToggleButtons:
    """Toggle buttons to pick one of a few options (e.g. a query token)."""
    options = list(options)
    return widgets.ToggleButtons(options=options, value=options[0] if value is None else value,
                                 description=description, style=_STYLE)


class LiveFigure(widgets.VBox):
    """Controls, then a picture of ``fig`` that ``redraw`` keeps up to date.

    Args:
        fig: a figure built once (e.g. with :func:`helpers.plotting.new_figure`).
        redraw: ``redraw(**values)`` updates the figure's artists for the current
            control values (keys are the names in ``controls``). Keep it light:
            it runs on every slider step.
        controls: ``{name: widget}``; each widget's ``value`` is passed by name.
        dpi: resolution of the rendered picture.
    """

    def __init__(self, fig: Figure, redraw: Callable[..., None], controls: Mapping[str, widgets.ValueWidget],
                 *, dpi: int = 80):
        if not isinstance(fig, Figure):
            raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
        if not callable(redraw):
            raise TypeError("redraw must be callable as redraw(**values)")
        if not controls:
            raise ValueError("controls must name at least one widget")
        self.fig, self.redraw, self.controls, self.dpi = fig, redraw, dict(controls), dpi
        # Shown at the size it is rendered, never stretched to the width of the notebook.
        width_px = round(fig.get_figwidth() * dpi)
        self.image = widgets.Image(format="png", layout=widgets.Layout(width=f"{width_px}px", height="auto"))
        super().__init__(children=[*self.controls.values(), self.image])
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()
        # The first render placed every axis; re-running the layout engine on each slider
        # step would cost about a third of the redraw time, so keep that layout from now on.
        fig.set_layout_engine("none")

    def values(self) -> dict:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self) -> None:
        """Redraw for the current values and swap the new picture in."""
        self.redraw(**self.values())
        self.image.value = figure_to_png(self.fig, dpi=self.dpi)

    def _on_change(self, _change) -> None:
        self.refresh()

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value in self.values().items())
        return f"LiveFigure({settings})"

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        # A static picture for readers without a kernel; JupyterLab prefers the live widget.
        bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle
