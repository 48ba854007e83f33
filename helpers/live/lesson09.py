"""The pictures of notebook 09 (positions): the sinusoidal encoding and its dot products, RoPE's rotating pairs
with their score (live), and where trained heads look on sequences longer than those seen in training.

Symbols as on the course's card: ``P`` ``(T, d_in)`` position vectors, ``omega_r`` the angular frequency of pair
``r``, ``R_i`` the RoPE rotation of position ``i``, ``s_ij`` the score of query ``i`` for key ``j``.
"""

from __future__ import annotations

import math

import torch
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..plotting import CourseFigure, Heatmap, new_figure
from ..position_model import PositionModel, PositionTask
from ..positions import angular_frequencies, apply_rope, sinusoidal_positions
from ..widgets import LiveFigure, choice, int_slider

__all__ = ["sinusoidal_figure", "rope_scores", "rope_explorer", "long_sequence_figure"]


def sinusoidal_figure(num_tokens: int = 64, d_in: int = 32, starts: tuple[int, ...] = (0, 20)) -> CourseFigure:
    """Left: the encoding ``P`` ``(T, d_in)`` as a heatmap. Right: ``P_i . P_j`` against the offset ``j - i``,
    one curve per start ``i`` in ``starts``; the curves coincide because the dot product depends on ``j - i`` only."""
    encoding = sinusoidal_positions(num_tokens, d_in)                           # (T, d_in)
    fig = new_figure(12.0, 4.6, ncols=2)
    left, right = fig.axes
    heatmap = Heatmap(left, encoding, [str(i) for i in range(num_tokens)], [str(c) for c in range(d_in)],
                      cmap="RdBu", vmin=-1.0, vmax=1.0, annotate=False, xlabel="column $c$ (columns $2r$, $2r+1$: pair $r$)",
                      ylabel="position $i$", title=f"Sinusoidal $P$, $T = {num_tokens}$, $d_\\mathrm{{in}} = {d_in}$",
                      colorbar_label="value of $P_{i,c}$ (position $i$, column $c$)")
    left.set_yticks(range(0, num_tokens, 8), labels=[str(i) for i in range(0, num_tokens, 8)])
    left.set_xticks(range(0, d_in, 4), labels=[str(c) for c in range(0, d_in, 4)], rotation=0, ha="center")
    heatmap.image.set_animated(False)
    span = num_tokens - max(starts)
    for start in starts:
        offsets = torch.arange(span)
        dots = (encoding[start] * encoding[start + offsets]).sum(dim=-1)       # (span,)
        right.plot(offsets, dots, marker="o" if start == starts[0] else "", markersize=3,
                   linestyle="-" if start == starts[0] else "--", label=f"$i = {start}$: $P_{{{start}}} \\cdot P_j$")
    right.axhline(0, color="gray", linewidth=0.8)
    froms = " and ".join(f"from $i = {start}$" for start in starts)
    right.set(xlabel="offset $j - i$ between the two positions", ylabel="dot product",
              title=f"$P_i \\cdot P_j$ against the offset $j - i$, {froms}\n"
                    f"(offsets 0 to {span - 1}: from $i = {max(starts)}$, position {num_tokens - 1} is {span - 1} on)")
    right.legend(loc="upper right")
    return fig


def rope_scores(query: torch.Tensor, key: torch.Tensor, query_positions: torch.Tensor,
                key_positions: torch.Tensor) -> torch.Tensor:
    """``(R_i q) . (R_j k)`` for every ``(i, j)`` pair given: ``(D,)``, ``(D,)``, ``(N,)``, ``(N,)`` -> ``(N,)``."""
    turned_q = apply_rope(query.expand(len(query_positions), -1), query_positions)   # (N, D)
    turned_k = apply_rope(key.expand(len(key_positions), -1), key_positions)         # (N, D)
    return (turned_q * turned_k).sum(dim=-1)


def _arrow(ax, color: str, style: str = "-", alpha: float = 1.0) -> FancyArrowPatch:
    arrow = FancyArrowPatch((0, 0), (1, 0), arrowstyle="-|>", mutation_scale=16, color=color, linewidth=2.2,
                            linestyle=style, alpha=alpha, zorder=3)
    ax.add_patch(arrow)
    return arrow


def rope_explorer(query: torch.Tensor, key: torch.Tensor, query_position: int = 3, key_position: int = 5,
                  pair: int = 0, max_position: int = 20) -> LiveFigure:
    """Sliders for the positions ``i`` (query) and ``j`` (key) and a choice of pair ``r``.

    Left: pair ``r`` of ``q`` and ``k`` before (faint) and after their rotations ``R_i``, ``R_j`` (angles
    ``i omega_r`` and ``j omega_r``). Right: the full score ``s_ij = (R_i q) . (R_j k)`` against the offset
    ``j - i`` (every pair summed), a dot at the current offset: moving ``i`` and ``j`` together keeps the dot.
    """
    head_dim = query.shape[-1]
    if query.shape != (head_dim,) or key.shape != (head_dim,):
        raise ValueError(f"query and key must be two vectors of the same shape (head_dim,), got "
                         f"{tuple(query.shape)} and {tuple(key.shape)}")
    omega = angular_frequencies(head_dim)                                    # (D / 2,)
    offsets = torch.arange(-max_position, max_position + 1)
    middle = torch.full_like(offsets, max_position)                          # i = max_position, j = i + offset
    whole = rope_scores(query, key, middle, middle + offsets)                 # at whole offsets: (2 max + 1,)
    # Between whole numbers: s = q . R_t k = Re(sum_r conj(q_r) k_r e^{1j t omega_r}), pairs as complex numbers.
    dense = torch.linspace(-max_position, max_position, 40 * max_position + 1)
    q_c = torch.view_as_complex(query.reshape(-1, 2).double().contiguous())  # (D / 2,)
    k_c = torch.view_as_complex(key.reshape(-1, 2).double().contiguous())
    curve = (q_c.conj() * k_c * torch.polar(torch.ones(1, dtype=torch.float64),
                                            dense.double()[:, None] * omega.double())).real.sum(-1)
    fig = CourseFigure(figsize=(12.0, 5.0), layout="constrained")
    plane, scores = fig.subplots(1, 2)
    radius = float(torch.cat((query, key)).view(-1, 2).norm(dim=-1).max()) * 1.15   # room for the longest pair
    plane.set(xlim=(-radius, radius), ylim=(-radius, radius), aspect="equal",
              xlabel="dimension $2r$", ylabel="dimension $2r+1$")
    plane.axhline(0, color="gray", linewidth=0.6)
    plane.axvline(0, color="gray", linewidth=0.6)
    faint_q, faint_k = _arrow(plane, "tab:orange", ":", 0.6), _arrow(plane, "tab:green", ":", 0.6)
    arrow_q, arrow_k = _arrow(plane, "tab:orange"), _arrow(plane, "tab:green")
    plane.legend([arrow_q, faint_q, arrow_k, faint_k],
                 ["query pair, turned by $i\\,\\omega_r$", "query pair before turning",
                  "key pair, turned by $j\\,\\omega_r$", "key pair before turning"],
                 loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8.5, frameon=False)   # off the arrows
    scores.plot(dense, curve, color="tab:blue", linewidth=1.2)
    scores.plot(offsets, whole, "o", color="tab:blue", markersize=3.5)
    scores.axhline(0, color="gray", linewidth=0.6)
    dot, = scores.plot([0], [0], "o", color="red", markersize=9)
    scores.set(xlabel="offset $j - i$ (key position minus query position)",
               ylabel="score $s_{ij} = (R_i q) \\cdot (R_j k)$",
               title="The score depends on $j - i$ only")
    animated = [faint_q, faint_k, arrow_q, arrow_k, dot, plane.title, scores.title]

    def redraw(query_position: int, key_position: int, pair: int) -> None:
        r = int(pair)
        q_pair, k_pair = query[2 * r: 2 * r + 2], key[2 * r: 2 * r + 2]
        turned_q = apply_rope(query[None], torch.tensor([query_position]))[0, 2 * r: 2 * r + 2]
        turned_k = apply_rope(key[None], torch.tensor([key_position]))[0, 2 * r: 2 * r + 2]
        for arrow, vector in ((faint_q, q_pair), (faint_k, k_pair), (arrow_q, turned_q), (arrow_k, turned_k)):
            arrow.set_positions((0, 0), (float(vector[0]), float(vector[1])))
        angle_q, angle_k = query_position * float(omega[r]), key_position * float(omega[r])
        # whole degrees, and the difference of the two numbers shown, so that the title's arithmetic adds up
        shown_q, shown_k = round(math.degrees(angle_q)) % 360, round(math.degrees(angle_k)) % 360
        plane.set_title(f"Pair $r = {r}$, $\\omega_{r} = {float(omega[r]):.3g}$ rad per position\n"
                        f"query turned {shown_q}°, key {shown_k}°: the key {(shown_k - shown_q) % 360}° further",
                        fontsize=11)
        score = float(rope_scores(query, key, torch.tensor([query_position]), torch.tensor([key_position]))[0])
        dot.set_data([key_position - query_position], [score])
        scores.set_title(f"$i = {query_position}$, $j = {key_position}$, offset $j - i = "
                         f"{key_position - query_position}$: $s_{{ij}} = {score:.3f}$\n"
                         "(every pair summed; dots: whole offsets, the ones that occur)")

    pairs = [(f"r = {r}", r) for r in range(head_dim // 2)]
    return LiveFigure(fig, redraw, {
        "query_position": int_slider("query position i", query_position, 0, max_position),
        "key_position": int_slider("key position j", key_position, 0, max_position),
        "pair": choice("pair", pairs, pair),
    }, animated=animated)


def long_sequence_figure(models: dict[str, PositionModel], task: PositionTask, token_ids: torch.Tensor,
                         head: int = 0, trained_tokens: int | None = None, min_diagonal_weight: float = 0.2,
                         labelled: dict[str, tuple[int, ...]] | None = None) -> CourseFigure:
    """One heatmap per model: head ``head``'s weights on one sequence ``(T,)``, longer than the training ones.

    Red boxes mark each output's source ``i - offset``; outputs with nothing to copy have none. Dashed lines mark
    the trained length ``trained_tokens`` (after row and column ``trained_tokens - 1``). Other diagonals ``j - i``
    get a label in the margin, with an arrow to where they start: those in ``labelled[name]`` for the model
    ``name`` when ``labelled`` is given, else every one whose mean weight is at least ``min_diagonal_weight``.
    """
    num_tokens = token_ids.shape[-1]
    fig = new_figure(5.6 * len(models) + 0.6, 5.0, ncols=len(models))
    axes = list(fig.axes)                          # the heatmap axes (colour bars are added to fig.axes below)
    labels = [str(i) for i in range(num_tokens)]
    any_top = False
    for index, (ax, (name, model)) in enumerate(zip(axes, models.items())):
        device = next(model.parameters()).device
        with torch.no_grad():
            _, weights = model(token_ids[None].to(device), return_weights=True)   # (1, H, T, T)
        heatmap = Heatmap(ax, weights[0, head].cpu(), labels, labels, vmin=0.0, vmax=1.0, annotate=False,
                          xlabel="key: input position $j$", ylabel="query: output position $i$",
                          title=f"{name}: $A$ of head {head}, $T = {num_tokens}$",
                          colorbar_label="attention weight $a_{ij}$ (one scale for every panel)")
        if index < len(models) - 1:                # one colour bar, on the right: every panel shares 0..1
            heatmap.colorbar.remove()
        step = max(1, num_tokens // 8)
        ax.set_xticks(range(0, num_tokens, step), labels=labels[::step], rotation=0, ha="center")
        ax.set_yticks(range(0, num_tokens, step), labels=labels[::step])
        for i in range(task.offset, num_tokens):
            ax.add_patch(Rectangle((i - task.offset - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red",
                                   linewidth=1.0, zorder=3))
        if trained_tokens is not None and trained_tokens < num_tokens:
            for line in (ax.axhline, ax.axvline):
                line(trained_tokens - 0.5, color="white", linestyle="--", linewidth=1.2, zorder=4)
            ax.text(trained_tokens + 0.4, num_tokens - 1.2, f"trained: $T = {trained_tokens}$", fontsize=10.5,
                    zorder=5, bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85))
        matrix = weights[0, head].cpu()
        if labelled is not None:
            marked = list(labelled.get(name, ()))
        else:
            marked = [offset for offset in range(-(num_tokens - 1), num_tokens) if offset != -task.offset
                      and float(torch.diagonal(matrix, offset).mean()) >= min_diagonal_weight]
        box = dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="black", linewidth=0.6)
        behind = sorted((offset for offset in marked if offset < 0), reverse=True)
        text_x = num_tokens - 1 + (behind[0] if behind else 0) + 3      # right of the nearest diagonal behind
        for offset in marked:   # ahead: above column j = offset; behind: inside, in the band right of the diagonal
            if offset >= 0:
                ax.annotate(f"$j - i = {offset:+d}$", (offset, -0.5), xytext=(0, 16), textcoords="offset points",
                            fontsize=10.5, ha="center", va="bottom", bbox=box, annotation_clip=False, zorder=5,
                            arrowprops=dict(arrowstyle="-|>", color="black", linewidth=0.8))
                continue
            row = num_tokens - 5 + 2 * behind.index(offset)             # a cell near the diagonal's lower end
            ax.annotate(f"$j - i = {offset:+d}$", (row + offset, row), xytext=(text_x, row - 1.5), textcoords="data",
                        fontsize=10.5, ha="left", va="center", bbox=box, zorder=5,
                        arrowprops=dict(arrowstyle="-|>", color="white", linewidth=1.0))
        any_top = any_top or any(offset >= 0 for offset in marked)
    if any_top:                                     # room above the top labels, the same on every panel
        for ax in axes:
            ax.title.set_text(ax.get_title() + "\n\n")
    return fig
