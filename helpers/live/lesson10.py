"""The pictures of notebook 10 (cross-attention): non-square weights over a padded source, and the explorer.

Every heatmap shows cross-attention weights of one head on one example: rows are the output words (the queries
``i``, ``T_q`` of them), columns the source digits (the keys ``j``, ``T_k`` of them), on a fixed 0..1 colour
scale. The source's padding columns are hatched grey (``///``): the padding mask hides them, so their weight is 0.
Padded output words (rows) are hatched the other way (``\\\\``) and see-through in every picture: a padded target
position, which the loss ignores. Red boxes mark the two digits each output word needs (the task's ideal pattern,
both heads together). Every picture says all this in a legend.
"""

from __future__ import annotations

import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from ..number_words import NumberWordsModel, NumberWordsTask, number_to_words
from ..plotting import Bars, CourseFigure, Heatmap, new_figure
from ..widgets import LiveFigure, int_slider

__all__ = ["output_labels", "ideal_alignment_figure", "cross_weights_figure", "cross_attention_explorer"]

XLABEL = "key: source token $j$ (the digit, over its position $j$)"
YLABEL = "query: output word $i$"
ROW_OUTLINE = "#00bfff"  # the chosen output word's row: not red, which marks the ideal pattern
NEEDED, NOT_NEEDED = "#08519c", "#f0f0f0"   # the ideal pattern: two colours, not a colour scale
PAD_STYLE = dict(facecolor="#d9d9d9", edgecolor="#737373", hatch="///", linewidth=0.0)
PAD_ROW_STYLE = dict(facecolor="none", edgecolor="#737373", hatch="\\\\", linewidth=0.0)   # see-through
PADDED_TARGET = "(padded target)"   # the label of a padded output word: not a word the model could write


def output_labels(task: NumberWordsTask, source_ids: torch.Tensor, answers: torch.Tensor | None = None) -> list[str]:
    """``"out i: thirty-one"``: the word output ``i`` must write, or the model's ``answers`` with ✗ where wrong.

    A padded output word is labelled ``"out i: (padded target)"``: the loss ignores whatever the model writes there.
    """
    wanted = [PADDED_TARGET if w == "pad" else w for w in task.target_words(task.targets(source_ids))]
    if answers is None:
        return [f"out {i}: {w}" for i, w in enumerate(wanted)]
    labels = []
    for i, (answer, word) in enumerate(zip(answers.tolist(), wanted)):
        written = word if word == PADDED_TARGET else number_to_words(answer + 10)   # target id t is number t + 10
        labels.append(f"out {i}: {written}" + ("" if written == word else " ✗"))
    return labels


def _upright_keys(ax: Axes) -> None:
    """Key labels (digit over position) read best upright, centred under their column."""
    for label in ax.get_xticklabels():
        label.set(rotation=0, ha="center", rotation_mode="default")


def _pad_patches(ax: Axes, num_rows: int, num_keys: int, bottom: float | None = None,
                 height: float | None = None) -> list[Rectangle]:
    """One hatched rectangle per source column (shown only where that column is padding)."""
    bottom = -0.5 if bottom is None else bottom
    height = num_rows if height is None else height
    return [ax.add_patch(Rectangle((j - 0.5, bottom), 1, height, zorder=2.1, visible=False, **PAD_STYLE))
            for j in range(num_keys)]


def _pad_row_patches(ax: Axes, task: NumberWordsTask) -> list[Rectangle]:
    """One see-through hatched rectangle per output word (shown only where that word is padded)."""
    return [ax.add_patch(Rectangle((-0.5, i - 0.5), task.num_keys, 1, zorder=2.2, visible=False, **PAD_ROW_STYLE))
            for i in range(task.num_queries)]


def _padded_words(task: NumberWordsTask, source_ids: torch.Tensor) -> torch.Tensor:
    return task.targets(source_ids) == task.ignore_id                       # (T_q,): True = padded output word


def _legend_handles(ideal: bool = True) -> list[Patch]:
    handles = [Patch(label="source padding (hidden by the mask)", **PAD_STYLE),
               Patch(label="padded target word", **PAD_ROW_STYLE),
               Patch(label="both", **{**PAD_STYLE, "hatch": "xxx"})]   # where the two hatchings cross
    if ideal:
        handles.append(Patch(facecolor="none", edgecolor="red", linewidth=1.5, label="the digits a word needs"))
    return handles


def _show_padding(patches: list[Rectangle], padding: torch.Tensor) -> None:
    for patch, hidden in zip(patches, padding.tolist()):
        patch.set_visible(bool(hidden))


def _ideal_boxes(ax: Axes, task: NumberWordsTask) -> list[tuple[int, Rectangle]]:
    """A red box on each cell of the ideal pattern, as ``(output word i, box)`` pairs."""
    rows, cols = task.ideal_pattern().sum(dim=0).nonzero(as_tuple=True)
    return [(i, ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5,
                                       zorder=3)))
            for i, j in zip(rows.tolist(), cols.tolist())]


def _show_ideal(boxes: list[tuple[int, Rectangle]], task: NumberWordsTask, source_ids: torch.Tensor) -> None:
    """Only the output words that exist in this example get their boxes (a padded word needs nothing)."""
    real = (task.targets(source_ids) != task.ignore_id).tolist()
    for i, box in boxes:
        box.set_visible(real[i])


def _write_real_weights(ax: Axes, weights: torch.Tensor, task: NumberWordsTask, source_ids: torch.Tensor) -> None:
    """Each weight of a real word on a real digit, written in its cell (padding rows and columns stay blank)."""
    real_rows = (task.targets(source_ids) != task.ignore_id).tolist()
    real_cols = (~task.source_padding_mask(source_ids)).tolist()
    for i, real_row in enumerate(real_rows):
        for j, real_col in enumerate(real_cols):
            if real_row and real_col:
                value = float(weights[i, j])
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9, zorder=4,
                        color="black" if value > 0.5 else "white")


def _heatmap(ax: Axes, weights: torch.Tensor, task: NumberWordsTask, source_ids: torch.Tensor, rows: list[str],
             title: str, colorbar: bool = True, colorbar_label: str = "cross-attention weight $a_{ij}$"
             ) -> tuple[Heatmap, list[Rectangle], list[tuple[int, Rectangle]]]:
    heatmap = Heatmap(ax, weights, rows, task.source_labels(source_ids), vmin=0.0, vmax=1.0, annotate=False,
                      xlabel=XLABEL, ylabel=YLABEL, title=title, colorbar_label=colorbar_label)
    if not colorbar:
        heatmap.colorbar.remove()
    _upright_keys(ax)
    patches = _pad_patches(ax, task.num_queries, task.num_keys)
    _show_padding(patches, task.source_padding_mask(source_ids))
    row_patches = _pad_row_patches(ax, task)
    _show_padding(row_patches, _padded_words(task, source_ids))
    boxes = _ideal_boxes(ax, task)
    _show_ideal(boxes, task, source_ids)
    return heatmap, patches + row_patches + [box for _, box in boxes], boxes


def ideal_alignment_figure(task: NumberWordsTask, source_ids: torch.Tensor) -> CourseFigure:
    """The digits each output word needs, on one example ``(T_k,)``: a ``(T_q, T_k)`` 0/1 matrix in two colours.

    Dark cells: word ``i`` needs digit ``j``; light cells: it does not; hatched: the source's padding (columns) and
    the padded output words (rows, the other way). Only the example's real words get dark cells (a padded word
    needs nothing).
    """
    fig = new_figure(9.4, 3.6)
    ax = fig.axes[0]
    real = (task.targets(source_ids) != task.ignore_id).float()                # (T_q,)
    needed = task.ideal_pattern().sum(dim=0) * real[:, None]                   # (T_q, T_k): 1 = needed
    heatmap = Heatmap(ax, needed, output_labels(task, source_ids), task.source_labels(source_ids),
                      cmap=ListedColormap([NOT_NEEDED, NEEDED]), vmin=0.0, vmax=1.0, annotate=False,
                      xlabel=XLABEL, ylabel=YLABEL,
                      title=f"What output word $i$ needs: a $(T_q, T_k) = ({task.num_queries}, {task.num_keys})$ "
                            "pattern")
    heatmap.colorbar.remove()
    _upright_keys(ax)
    _show_padding(_pad_patches(ax, task.num_queries, task.num_keys), task.source_padding_mask(source_ids))
    _show_padding(_pad_row_patches(ax, task), _padded_words(task, source_ids))
    ax.legend(handles=[Patch(facecolor=NEEDED, label="word $i$ needs digit $j$"),
                       Patch(facecolor=NOT_NEEDED, edgecolor="#bdbdbd", label="not needed"),
                       *_legend_handles(ideal=False)],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=10, frameon=False)
    return fig


def cross_weights_figure(model: NumberWordsModel, task: NumberWordsTask, source_ids: torch.Tensor,
                         title: str = "", annotate: bool = False) -> CourseFigure:
    """Every head's cross-attention weights ``(T_q, T_k)`` on one example ``(T_k,)``; rows show the model's words.

    Padded source columns are hatched grey (weight 0); padded output words (rows) are hatched see-through: they
    are still queries with weights, but the loss ignores what they write. A legend below names both and the red
    boxes. ``annotate=True`` writes each real word's weight on each real digit in its cell.
    """
    with torch.no_grad():
        logits, weights = model(source_ids[None].to(next(model.parameters()).device), return_weights=True)
    weights, answers = weights[0].cpu(), logits[0].argmax(dim=-1).cpu()    # (H, T_q, T_k), (T_q,)
    num_heads = weights.shape[0]
    fig = new_figure(5.6 * num_heads + 0.8, 3.9 if num_heads > 1 else 4.5, ncols=num_heads)
    rows = output_labels(task, source_ids, answers)
    for head in range(num_heads):
        _heatmap(fig.axes[head], weights[head], task, source_ids, rows if head == 0 else [""] * len(rows),
                 f"{title}$A$ of head {head}, $(T_q, T_k)$", colorbar=head == num_heads - 1)
        if annotate:
            _write_real_weights(fig.axes[head], weights[head], task, source_ids)
        if head > 0:
            fig.axes[head].set_ylabel("")
    fig.legend(handles=_legend_handles(), loc="outside lower center", ncol=4 if num_heads > 1 else 2, fontsize=10,
               frameon=False)   # one head: one entry a line, so the legend fits under the panel
    return fig


def cross_attention_explorer(model: NumberWordsModel, task: NumberWordsTask, source_ids: torch.Tensor,
                             output_word: int = 0, example: int = 0) -> LiveFigure:
    """Two sliders (output word ``i``, example) over the trained model's cross-attention.

    Top: each head's weights ``(T_q, T_k)`` on the chosen example, the chosen output word's row outlined.
    Bottom: that row as bars over the labelled source tokens, one chart per head; padding hatched (weight 0).
    Padded output words are hatched as in :func:`cross_weights_figure`; a legend on top names every mark.
    ``source_ids`` ``(N, T_k)`` are the examples to choose from.
    """
    if not isinstance(source_ids, torch.Tensor) or source_ids.dim() != 2:
        raise ValueError("source_ids must be a (num_examples, num_keys) tensor of examples")
    with torch.no_grad():
        logits, weights = model(source_ids.to(next(model.parameters()).device), return_weights=True)
    weights, answers = weights.cpu(), logits.argmax(dim=-1).cpu()          # (N, H, T_q, T_k), (N, T_q)
    num_heads = weights.shape[1]
    fig = CourseFigure(figsize=(5.4 * num_heads + 1.0, 7.4), layout="constrained")
    fig.legend(handles=[*_legend_handles(), Patch(facecolor="none", edgecolor=ROW_OUTLINE, linewidth=3.0,
                                                  label="output word $i$")],
               loc="outside upper center", ncol=5, fontsize=10, frameon=False)
    grid = fig.add_gridspec(2, num_heads, height_ratios=(1.1, 1))
    maps, bars, pads, row_pads, boxes, changing, outlines = [], [], [], [], [], [], []
    rows = output_labels(task, source_ids[0], answers[0])
    for head in range(num_heads):
        heatmap, changed, head_boxes = _heatmap(fig.add_subplot(grid[0, head]), weights[0, head], task,
                                                source_ids[0], rows if head == 0 else [""] * len(rows), "",
                                                colorbar=head == num_heads - 1)
        if head > 0:   # the rows are labelled once, on the left
            heatmap.ax.set_ylabel("")
        maps.append(heatmap)
        outlines.append(heatmap.ax.add_patch(Rectangle((-0.5, -0.5), task.num_keys, 1, fill=False,
                                                       edgecolor=ROW_OUTLINE, linewidth=4.0, zorder=3.5)))
        pads.append(changed[:task.num_keys])
        row_pads.append(changed[task.num_keys:task.num_keys + task.num_queries])
        boxes += head_boxes
        changing += changed
    changing += outlines   # above the red boxes, and thicker: the chosen row stands out
    for head in range(num_heads):
        ax = fig.add_subplot(grid[1, head])
        chart = Bars(ax, weights[0, head, 0], task.source_labels(source_ids[0]), ylim=(0.0, 1.05),
                     xlabel=XLABEL, ylabel="weight $a_{ij}$" if head == 0 else "", annotate=True)
        _upright_keys(ax)
        bars.append(chart)
        pads.append(_pad_patches(ax, 1, task.num_keys, bottom=0.0, height=1.05))
        changing += pads[-1]

    def redraw(output_word: int, example: int) -> None:
        padding = task.source_padding_mask(source_ids[example])
        rows = output_labels(task, source_ids[example], answers[example])
        for head in range(num_heads):
            maps[head].update(weights[example, head],
                              title=f"$A$ of head {head}, example {example}: $(T_q, T_k) = "
                                    f"({task.num_queries}, {task.num_keys})$")
            outlines[head].set_y(output_word - 0.5)
            maps[head].ax.set_yticklabels(rows if head == 0 else [""] * len(rows))
            for ax in (maps[head].ax, bars[head].ax):
                ax.set_xticklabels(task.source_labels(source_ids[example]))
                _upright_keys(ax)
            row = weights[example, head, output_word]
            bars[head].update(row, title=f"head {head}: the weights of {rows[output_word].split(': ')[0]} "
                                         f"(row {output_word} of $A$)")
            for text, hidden in zip(bars[head].texts, padding.tolist()):
                if hidden:                 # a masked bar is 0 by construction: no number over the hatching
                    text.set_text("")
        for patches in pads:
            _show_padding(patches, padding)
        for patches in row_pads:
            _show_padding(patches, _padded_words(task, source_ids[example]))
        _show_ideal(boxes, task, source_ids[example])

    return LiveFigure(fig, redraw, {
        "output_word": int_slider("output word i", output_word, 0, task.num_queries - 1),
        "example": int_slider("example", example, 0, len(source_ids) - 1),
    }, animated=changing)
