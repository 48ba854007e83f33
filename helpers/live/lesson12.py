"""The pictures of notebook 12 (two layers: induction heads and attention sinks): the phase change over training,
a training-step slider over both layers' attention, and a sequence you type, seen by every head.

Weights use a fixed 0..1 colour scale; a blank cell is a key the query cannot see (the future) or a token that
is not there.
"""

from __future__ import annotations

import math

import ipywidgets as widgets
import torch

from ..circuits import composed_qk_circuit, ov_circuit, positional_qk_circuit, qk_circuit
from ..induction import TOKENS, InductionModel, InductionRun, encode
from ..plotting import CourseFigure, Heatmap
from ..widgets import LiveFigure, choice, steps_slider

__all__ = ["EXAMPLES", "best_heads", "phase_change_figure", "training_stepper", "sequence_explorer",
           "circuits_figure", "logit_attribution_figure", "composition_over_training_figure"]


def best_heads(run: InductionRun) -> tuple[int, int]:
    """``(layer-0 head with the highest final previous-token score, layer-1 head with the highest prefix-matching)``."""
    return int(run.previous_token[-1, 0].argmax()), int(run.prefix_matching[-1, 1].argmax())


def phase_change_figure(run: InductionRun, control: InductionRun | None = None,
                        seen_guess: float | None = None) -> CourseFigure:
    """Left: the loss on the tokens that can be copied, over training (and a one-layer ``control``), with the
    uniform guess and, if given, ``seen_guess`` (the loss of a guess among the tokens seen). Right: the
    previous-token score of the best layer-0 head, the prefix-matching and copying scores of the best layer-1 head
    (:func:`best_heads`). The legends sit below the plots, off the curves."""
    if run.model.num_layers < 2:
        raise ValueError("run must be a model with two layers")
    previous_head, induction_head = best_heads(run)
    fig = CourseFigure(figsize=(11, 4.4), layout="constrained")
    loss_ax, score_ax = fig.subplots(1, 2)
    loss_ax.plot(run.steps, run.in_context_losses, color="tab:red", label="two layers")
    if control is not None:
        loss_ax.plot(control.steps, control.in_context_losses, color="tab:gray", label="one layer")
    chance = math.log(run.model.vocab_size - 1)
    loss_ax.axhline(chance, color="black", linestyle="--", linewidth=1,
                    label=f"uniform guess: ln {run.model.vocab_size - 1} = {chance:.2f}")
    if seen_guess is not None:
        loss_ax.axhline(seen_guess, color="tab:purple", linestyle=":", linewidth=1.5,
                        label=f"guess among the tokens seen: mean ln Δ = {seen_guess:.2f}")
    loss_ax.set(xlabel="training step", ylabel="loss (nats)", title="Loss on the tokens that repeat",
                ylim=(0, chance + 0.4))
    loss_ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    score_ax.plot(run.steps, run.previous_token[:, 0, previous_head], color="tab:blue",
                  label=f"previous-token, L0H{previous_head}")
    score_ax.plot(run.steps, run.prefix_matching[:, 1, induction_head], color="tab:orange",
                  label=f"prefix-matching, L1H{induction_head}")
    score_ax.plot(run.steps, run.copying[:, 1, induction_head], color="tab:green", linestyle=":",
                  label=f"copying, L1H{induction_head}")
    score_ax.set(xlabel="training step", ylabel="score", title="Head scores", ylim=(0, 1.05))
    score_ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    return fig


def _head_grid(fig: CourseFigure, grid, num_layers: int, num_heads: int, num_tokens: int,
               labels: list[str]) -> list[list[Heatmap]]:
    """``num_layers`` x ``num_heads`` blank heatmaps ``(T, T)`` in the first columns of ``grid``: maps[layer][head].
    One colour bar (the last head's) per row; token labels at 8 points, unrotated."""
    blank = torch.full((num_tokens, num_tokens), float("nan"))
    maps = []
    for layer in range(num_layers):
        row = []
        for head in range(num_heads):
            ax = fig.add_subplot(grid[layer, head])
            ax.set_facecolor("#f2f2f2")
            heatmap = Heatmap(ax, blank, labels, labels, annotate=False, vmin=0.0, vmax=1.0, cmap="viridis",
                              xlabel="key" if layer == num_layers - 1 else "", ylabel="query" if head == 0 else "",
                              colorbar_label="weight" if head == num_heads - 1 else "")
            if head != num_heads - 1:
                heatmap.colorbar.remove()
            ax.tick_params(labelsize=8, length=2, pad=1)
            ax.set_xticks(range(num_tokens), labels=labels, rotation=0, ha="center")
            row.append(heatmap)
        maps.append(row)
    return maps


def _causal_blank(weights: torch.Tensor) -> torch.Tensor:
    """``(T, T)`` weights with the hidden future blanked (``nan``), so a zero weight and a hidden key differ."""
    hidden = torch.ones_like(weights, dtype=torch.bool).triu(1)
    return weights.masked_fill(hidden, float("nan"))


def _mark_periods(ax, period: int, num_tokens: int) -> None:
    """White lines before positions ``1, 1 + Δ, 1 + 2Δ, ...``: where each period of the pattern starts."""
    for start in range(1, num_tokens, period):
        ax.axvline(start - 0.5, color="white", linewidth=0.8, zorder=2.2)
        ax.axhline(start - 0.5, color="white", linewidth=0.8, zorder=2.2)


def training_stepper(run: InductionRun, step: int | None = None) -> LiveFigure:
    """A slider over the checkpoints of ``run``: every head's weights on the watched sequence, with its scores, and
    the loss on the repeating tokens so far. White lines mark where each period of the sequence starts."""
    labels = [TOKENS[i] for i in run.watch_ids.tolist()]
    labels[0] = "•"  # <s>, one character like the others (s itself is a token), so that every label fits its cell
    num_layers, num_heads = run.model.num_layers, run.model.num_heads
    fig = CourseFigure(figsize=(10, 4.6 * num_layers + 2.6), layout="constrained")
    grid = fig.add_gridspec(num_layers + 1, num_heads, height_ratios=[1] * num_layers + [0.45])
    maps = _head_grid(fig, grid, num_layers, num_heads, len(labels), labels)
    for row in maps:
        for heatmap in row:
            heatmap.ax.set_title("\n ")  # room for the two-line titles the redraw writes
            _mark_periods(heatmap.ax, run.watch_period, len(labels))
    fig.suptitle(f"One held-out sequence, period Δ = {run.watch_period} (•: the start token <s>)\n"
                 "white lines: where each period starts; grey: the hidden future; scores: means over the held-out batch",
                 fontsize=10)
    loss_ax = fig.add_subplot(grid[num_layers, :])
    loss_ax.plot(run.steps, run.in_context_losses, color="tab:red")
    loss_ax.set(xlabel="training step", ylabel="loss on the\ntokens that repeat", ylim=(0, None))
    step_line = loss_ax.axvline(run.steps[0], color="black", linestyle="--", linewidth=1.5)

    def redraw(step: int) -> None:
        index = run.checkpoint(step)
        for layer in range(num_layers):
            for head in range(num_heads):
                maps[layer][head].update(
                    _causal_blank(run.watch_weights[index, layer, head]),
                    title=f"layer {layer} head {head}\nprevious-token {run.previous_token[index, layer, head]:.2f}, "
                          f"prefix-matching {run.prefix_matching[index, layer, head]:.2f}")
        step_line.set_xdata([step, step])
        loss_ax.title.set_text(f"step {step}: loss {run.in_context_losses[index]:.2f}")

    loss_ax.set_title(" ")
    loss_ax.title.set_animated(True)
    step = run.steps[-1] if step is None else step
    return LiveFigure(fig, redraw, {"step": steps_slider("training step", run.steps, step)}, animated=[step_line])


EXAMPLES = ("qwertyqwer", "abcab", "attention4allatt", "ABCDEFGH")


def sequence_explorer(model: InductionModel, text: str = EXAMPLES[0], max_tokens: int = 20) -> LiveFigure:
    """Example buttons and a text box: type letters and digits (one token each); see where every head of ``model``
    looks, and the token the model predicts after each one. A button puts its example in the text box."""
    if len(text) + 1 > max_tokens:
        raise ValueError(f"text must have at most {max_tokens - 1} letters or digits, got {len(text)}")
    model.eval()
    num_layers, num_heads = model.num_layers, model.num_heads
    fig = CourseFigure(figsize=(10, 4 * num_layers + 0.6), layout="constrained")
    grid = fig.add_gridspec(num_layers, num_heads)
    maps = _head_grid(fig, grid, num_layers, num_heads, max_tokens, [""] * max_tokens)
    for layer, row in enumerate(maps):
        for head, heatmap in enumerate(row):
            heatmap.ax.set_title(f"layer {layer} head {head}")
    suptitle = fig.suptitle(" ", fontsize=10)  # the redraw sets its text: a new suptitle would lose the layout's place
    box = widgets.Text(value=text, description="your tokens (Enter)", style={"description_width": "initial"},
                       layout=widgets.Layout(width="420px"), continuous_update=False)
    examples = choice("examples", EXAMPLES, text if text in EXAMPLES else EXAMPLES[0])
    examples.observe(lambda change: setattr(box, "value", change["new"]), names="value")  # before the picture's

    def redraw(example: str, text: str) -> None:
        kept = "".join(ch for ch in text if ch in TOKENS[1:])[:max_tokens - 1]
        token_ids = encode(kept)  # (1, T): the start token, then one token per letter or digit
        num_tokens = token_ids.shape[1]
        with torch.no_grad():
            logits, all_weights = model(token_ids.to(next(model.parameters()).device), return_weights=True)
        predicted = "".join(TOKENS[i] for i in logits[0].argmax(dim=-1).tolist())
        labels = ["•", *(TOKENS[i] for i in token_ids[0, 1:].tolist())] + [""] * (max_tokens - num_tokens)
        rows = [f"{name} → {guess}" for name, guess in zip(labels, predicted)] + [""] * (max_tokens - num_tokens)
        for layer in range(num_layers):
            for head in range(num_heads):
                shown = torch.full((max_tokens, max_tokens), float("nan"))
                shown[:num_tokens, :num_tokens] = _causal_blank(all_weights[layer][0, head].cpu())
                heatmap = maps[layer][head]
                heatmap.update(shown, title=f"layer {layer} head {head}")
                heatmap.ax.set_xticks(range(max_tokens), labels=labels, rotation=0, ha="center")
                heatmap.ax.set_yticks(range(max_tokens), labels=rows if head == 0 else labels)
                heatmap.ax.set_xlim(-0.5, num_tokens - 0.5)  # only the tokens typed: no blank margin
                heatmap.ax.set_ylim(num_tokens - 0.5, -0.5)
        dropped = "" if kept == text else "  (only letters and digits count; at most "f"{max_tokens - 1})"
        suptitle.set_text(f"•: the start token <s>; query rows: token → the model's next token{dropped}")

    return LiveFigure(fig, redraw, {"example": examples, "text": box})


def _matrix_panel(fig: CourseFigure, ax, matrix: torch.Tensor, title: str, xlabel: str, ylabel: str,
                  ticks: list[int], tick_labels: list[str], colorbar_label: str) -> None:
    """One circuit as a heatmap on a colour scale centred on 0 (red: raises, blue: lowers), its colour bar
    labelled ``colorbar_label`` (what an entry is: a scaled score or a logit)."""
    limit = float(matrix.nan_to_num(0.0).abs().max())
    image = ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    ax.set_facecolor("#f2f2f2")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.set_xticks(ticks, labels=tick_labels)
    ax.set_yticks(ticks, labels=tick_labels)
    ax.tick_params(labelsize=8)
    fig.colorbar(image, ax=ax, shrink=0.85, label=colorbar_label)


def _positional_panel(fig: CourseFigure, ax, scores: torch.Tensor, title: str, ticks: list[int]) -> None:
    """Positional scores ``(T, T)`` (``nan`` in the future) drawn as the weights a softmax of each row gives them,
    on a fixed 0..1 scale, with a dot on each row's largest score and a dashed line along key ``i - 1``."""
    hidden = scores.isnan()
    weights = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1).masked_fill(hidden, float("nan"))
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_facecolor("#f2f2f2")
    rows = torch.arange(len(scores))
    ax.plot(rows[1:] - 1, rows[1:], color="tab:red", linestyle="--", linewidth=1, label="key i − 1")
    ax.plot(weights.nan_to_num(-1.0).argmax(dim=-1), rows, "o", color="white", markeredgecolor="black",
            markeredgewidth=0.5, markersize=3.5, linestyle="none", label="each row's largest score")
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set(title=title, xlabel="key position j", ylabel="query position i")
    ax.set_xticks(ticks, labels=[str(i) for i in ticks])
    ax.set_yticks(ticks, labels=[str(i) for i in ticks])
    ax.tick_params(labelsize=8)
    fig.colorbar(image, ax=ax, shrink=0.85, label="weight from positions alone")


def _w(kind: str, layer: int, head: int) -> str:
    """``W_QK^{L1H0}`` in mathtext: the card's symbol with the head as its superscript."""
    return f"W_{{{kind}}}^{{\\mathrm{{L{layer}H{head}}}}}"


def circuits_figure(model: InductionModel, previous_head: int, induction_head: int,
                    num_tokens: int | None = None) -> CourseFigure:
    """Four circuits read off the weights: the positional QK circuit of layer 0's ``previous_head`` (as the weights
    a softmax of each row gives, with each row's largest score marked); layer 1's
    ``induction_head``: its QK circuit on tokens, the same composed with ``previous_head``'s OV circuit (the key
    side holding what the previous-token head wrote), and its OV circuit."""
    num_tokens = model.context_length if num_tokens is None else num_tokens
    token_ticks = [index for index, name in enumerate(TOKENS) if name in ("A", "M", "a", "m", "0")]
    token_names = [TOKENS[i] for i in token_ticks]
    position_ticks = list(range(0, num_tokens, 5))
    score = "scaled score $s/\\sqrt{d_\\mathrm{head}}$"  # an entry of a QK circuit: what the softmax receives
    fig = CourseFigure(figsize=(11, 9.6), layout="constrained")
    axes = fig.subplots(2, 2)
    positional = f"$P\\, {_w('QK', 0, previous_head)}\\, P^\\top$"
    _positional_panel(fig, axes[0, 0], positional_qk_circuit(model, 0, previous_head, num_tokens),
                      f"L0H{previous_head}: positions only, softmax of each row of {positional}", position_ticks)
    _matrix_panel(fig, axes[0, 1], qk_circuit(model, 1, induction_head),
                  f"L1H{induction_head}: tokens only, $E_\\mathrm{{token}}\\, {_w('QK', 1, induction_head)}\\, E_\\mathrm{{token}}^\\top$", "key token", "query token", token_ticks, token_names, score)
    _matrix_panel(fig, axes[1, 0], composed_qk_circuit(model, previous_head, induction_head),
                  f"Key through L0H{previous_head}: $E_\\mathrm{{token}}\\, {_w('QK', 1, induction_head)} (E_\\mathrm{{token}}\\, {_w('OV', 0, previous_head)})^\\top$",
                  "token L0H%d wrote at the key" % previous_head, "query token", token_ticks, token_names, score)
    _matrix_panel(fig, axes[1, 1], ov_circuit(model, 1, induction_head),
                  f"L1H{induction_head}: OV circuit, $E_\\mathrm{{token}}\\, {_w('OV', 1, induction_head)}\\, W_\\mathrm{{unembed}}$", "logit of token", "token attended to",
                  token_ticks, token_names, "logit (read-out bias left out)")
    fig.suptitle("Read off the weights: weights from positions (top left), scaled scores (QK) and logits (OV); "
                 "red-blue scales centred on 0", fontsize=11)
    return fig


def logit_attribution_figure(names: list[str], parts: torch.Tensor, token_ids: torch.Tensor,
                             period: int) -> CourseFigure:
    """``parts`` ``(C, T, V)`` of one sequence (:func:`helpers.circuits.direct_logit_attribution`): what each
    piece adds to the logit of the right next token at every position, minus its mean over the vocabulary."""
    if parts.dim() != 3 or parts.shape[0] != len(names) or token_ids.shape != (parts.shape[1],):
        raise ValueError("need parts (C, T, V), one name per part and token_ids (T,)")
    centred = parts[:, :-1] - parts[:, :-1].mean(dim=-1, keepdim=True)  # a shift of every logit changes nothing
    right = centred.gather(-1, token_ids[1:].expand(len(names), -1)[..., None])[..., 0]  # (C, T - 1)
    fig = CourseFigure(figsize=(11, 3.4), layout="constrained")
    ax = fig.subplots()
    limit = float(right.abs().max())
    image = ax.imshow(right.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    ax.axvline(period + 0.5, color="black", linewidth=1.2, linestyle="--")
    ax.set_yticks(range(len(names)), labels=names)
    labels = ["•" if i == 0 else TOKENS[i] for i in token_ids[:-1].tolist()]
    ax.set_xticks(range(len(labels)), labels=[f"{a}→{TOKENS[b]}" for a, b in zip(labels, token_ids[1:].tolist())],
                  rotation=90, fontsize=8)
    ax.set(xlabel=f"position i: its token → the right next token (•: <s>; dashed line: from here on the current "
                  f"token occurred before, Δ = {period})", title="What each piece adds to the logit of the right next token")
    fig.colorbar(image, ax=ax, label="logit")
    return fig


def composition_over_training_figure(run: InductionRun, scores: dict[str, torch.Tensor], previous_head: int,
                                     induction_head: int, baseline: float | None = None,
                                     phase: tuple[int, int] | None = None) -> CourseFigure:
    """Left: the loss on the repeating tokens. Right: the Q-, K- and V-composition scores ``scores[side]``
    ``(S, H, H)`` of L0H``previous_head`` into L1H``induction_head`` at every checkpoint, and ``baseline``.
    ``phase``: ``(first step, last step)`` shaded grey on both plots."""
    fig = CourseFigure(figsize=(11, 3.8), layout="constrained")
    loss_ax, score_ax = fig.subplots(1, 2)
    loss_ax.plot(run.steps, run.in_context_losses, color="tab:red")
    loss_ax.set(xlabel="training step", ylabel="loss (nats)", title="Loss on the tokens that repeat", ylim=(0, None))
    for side, color in (("K", "tab:blue"), ("Q", "tab:orange"), ("V", "tab:green")):
        score_ax.plot(run.steps, scores[side][:, previous_head, induction_head], color=color,
                      label=f"{side}-composition")
    if baseline is not None:
        score_ax.axhline(baseline, color="black", linestyle="--", linewidth=1, label="random matrices")
    score_ax.set(xlabel="training step", ylabel="composition score",
                 title=f"L0H{previous_head} into L1H{induction_head}", ylim=(0, None))
    score_ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, frameon=False)
    if phase is not None:
        for ax in (loss_ax, score_ax):
            ax.axvspan(*phase, color="#e6e6e6", zorder=0)
        loss_ax.text(sum(phase) / 2, 0.97, "phase change", ha="center", va="top", fontsize=9, color="#555555",
                     transform=loss_ax.get_xaxis_transform())  # x in steps, y in axes units: above the curve
    return fig
