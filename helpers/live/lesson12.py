"""The pictures of notebook 12 (two layers: induction heads and attention sinks): the phase change over training,
a training-step slider over both layers' attention, and a sequence you type, seen by every head.

Weights use a fixed 0..1 colour scale; a blank cell is a key the query cannot see (the future) or a token that
is not there.
"""

from __future__ import annotations

import math

import ipywidgets as widgets
import torch

from ..induction import TOKENS, InductionModel, InductionRun, encode
from ..plotting import CourseFigure, Heatmap
from ..widgets import LiveFigure, choice, steps_slider

__all__ = ["EXAMPLES", "best_heads", "phase_change_figure", "training_stepper", "sequence_explorer"]


def best_heads(run: InductionRun) -> tuple[int, int]:
    """``(layer-0 head with the highest final previous-token score, layer-1 head with the highest prefix-matching)``."""
    return int(run.previous_token[-1, 0].argmax()), int(run.prefix_matching[-1, 1].argmax())


def phase_change_figure(run: InductionRun, control: InductionRun | None = None) -> CourseFigure:
    """Left: the loss on the tokens that can be copied, over training (and a one-layer ``control``). Right: the
    previous-token score of the best layer-0 head, the prefix-matching and copying scores of the best layer-1 head."""
    if run.model.num_layers < 2:
        raise ValueError("run must be a model with two layers")
    previous_head, induction_head = best_heads(run)
    fig = CourseFigure(figsize=(11, 3.6), layout="constrained")
    loss_ax, score_ax = fig.subplots(1, 2)
    loss_ax.plot(run.steps, run.in_context_losses, color="tab:red", label="two layers")
    if control is not None:
        loss_ax.plot(control.steps, control.in_context_losses, color="tab:gray", label="one layer")
    chance = math.log(run.model.vocab_size - 1)
    loss_ax.axhline(chance, color="black", linestyle="--", linewidth=1,
                    label=f"uniform guess: ln {run.model.vocab_size - 1}")
    loss_ax.set(xlabel="training step", ylabel="loss (nats)", title="Loss on the tokens that repeat",
                ylim=(0, chance + 0.4))
    loss_ax.legend(fontsize=9)
    score_ax.plot(run.steps, run.previous_token[:, 0, previous_head], color="tab:blue",
                  label=f"previous-token score, layer 0 head {previous_head}")
    score_ax.plot(run.steps, run.prefix_matching[:, 1, induction_head], color="tab:orange",
                  label=f"prefix-matching score, layer 1 head {induction_head}")
    score_ax.plot(run.steps, run.copying[:, 1, induction_head], color="tab:green", linestyle=":",
                  label=f"copying score, layer 1 head {induction_head}")
    score_ax.set(xlabel="training step", ylabel="score", title="Head scores", ylim=(0, 1.05))
    score_ax.legend(fontsize=9, loc="center right")
    return fig


def _head_grid(fig: CourseFigure, num_layers: int, num_heads: int, num_tokens: int, labels: list[str],
               columns: int) -> list[list[Heatmap]]:
    """``num_layers`` x ``num_heads`` blank heatmaps ``(T, T)`` in a grid of ``columns`` columns: maps[layer][head]."""
    grid = fig.add_gridspec(num_layers, columns)
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
            ax.tick_params(labelsize=6.5)
            ax.set_xticks(range(num_tokens), labels=labels, rotation=90, ha="center")
            row.append(heatmap)
        maps.append(row)
    return maps


def _causal_blank(weights: torch.Tensor) -> torch.Tensor:
    """``(T, T)`` weights with the hidden future blanked (``nan``), so a zero weight and a hidden key differ."""
    hidden = torch.ones_like(weights, dtype=torch.bool).triu(1)
    return weights.masked_fill(hidden, float("nan"))


def training_stepper(run: InductionRun, step: int | None = None) -> LiveFigure:
    """A slider over the checkpoints of ``run``: every head's weights on the watched sequence, with its scores, and
    the loss on the repeating tokens so far."""
    labels = [TOKENS[i] for i in run.watch_ids.tolist()]
    num_layers, num_heads = run.model.num_layers, run.model.num_heads
    fig = CourseFigure(figsize=(13, 6.8), layout="constrained")
    maps = _head_grid(fig, num_layers, num_heads, len(labels), labels, num_heads + 1)
    for row in maps:
        for heatmap in row:
            heatmap.ax.set_title("\n ")  # room for the two-line titles the redraw writes
    loss_ax = fig.add_subplot(fig.axes[0].get_gridspec()[:, num_heads])
    loss_ax.plot(run.steps, run.in_context_losses, color="tab:red")
    loss_ax.set(xlabel="training step", ylabel="loss on the tokens that repeat (nats)", ylim=(0, None))
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
    fig = CourseFigure(figsize=(10, 7.4), layout="constrained")
    maps = _head_grid(fig, num_layers, num_heads, max_tokens, [""] * max_tokens, num_heads)
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
        labels = [TOKENS[i] for i in token_ids[0].tolist()] + [""] * (max_tokens - num_tokens)
        rows = [f"{name} → {guess}" for name, guess in zip(labels, predicted)] + [""] * (max_tokens - num_tokens)
        for layer in range(num_layers):
            for head in range(num_heads):
                shown = torch.full((max_tokens, max_tokens), float("nan"))
                shown[:num_tokens, :num_tokens] = _causal_blank(all_weights[layer][0, head].cpu())
                heatmap = maps[layer][head]
                heatmap.update(shown, title=f"layer {layer} head {head}")
                heatmap.ax.set_xticks(range(max_tokens), labels=labels, rotation=90, ha="center")
                heatmap.ax.set_yticks(range(max_tokens), labels=rows if head == 0 else labels)
        dropped = "" if kept == text else "  (only letters and digits count; at most "f"{max_tokens - 1})"
        fig.suptitle(f"query rows: token → the model's next token{dropped}", fontsize=10)

    return LiveFigure(fig, redraw, {"example": examples, "text": box})
