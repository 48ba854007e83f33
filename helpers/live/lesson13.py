"""The pictures of notebook 13 (a real model): your sentence seen by one head, and by all 72 heads at once.

Weights use a fixed 0..1 colour scale. A real encoder sees every token from every token (no causal mask), so
every cell of a heatmap is a weight.
"""

from __future__ import annotations

import ipywidgets as widgets
from matplotlib.patches import Rectangle
import torch

from ..bert_heads import read_sentence, word_positions
from ..plotting import CourseFigure, Heatmap
from ..pretrained import MiniLMEncoder
from ..widgets import LiveFigure, choice, int_slider

__all__ = ["sentence_explorer", "score_grid", "pronoun_rows", "bank_curves"]


def score_grid(scores: dict[str, torch.Tensor], marked: dict[str, tuple[int, int]] | None = None) -> CourseFigure:
    """One ``(L, H)`` heatmap per named head score (0..1 colour scale), side by side; ``marked``: a head to ring."""
    fig = CourseFigure(figsize=(3.6 * len(scores) + 0.8, 3.0), layout="constrained")
    axes = fig.subplots(1, len(scores), squeeze=False)[0]
    for ax, (name, score) in zip(axes, scores.items()):
        num_layers, num_heads = score.shape
        Heatmap(ax, score, [str(i) for i in range(num_layers)], [str(h) for h in range(num_heads)], title=name,
                xlabel="head", ylabel="layer", vmin=0.0, vmax=1.0, annotate=False,
                colorbar_label="score" if ax is axes[-1] else "")
        ax.tick_params(labelsize=8)
        ax.set_xticks(range(num_heads), labels=[str(h) for h in range(num_heads)], rotation=0, ha="center")
        if marked and name in marked:
            layer, head = marked[name]
            ax.add_patch(Rectangle(
                (head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2, zorder=3))
    for ax in axes[:-1]:
        ax.images[0].colorbar.remove()
    return fig


def sentence_explorer(encoder: MiniLMEncoder, tokenizer, text: str, layer: int = 0, head: int = 2,
                      max_tokens: int = 32) -> LiveFigure:
    """A text box, a layer and a head: left, that head's weights over your sentence's tokens; right, all heads of
    all layers (rows: layers, columns: heads), the chosen one framed in red. Sentences longer than ``max_tokens``
    tokens (``[CLS]`` and ``[SEP]`` included) are cut, and the title says so."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    num_layers, num_heads = encoder.num_layers, encoder.num_heads
    fig = CourseFigure(figsize=(12.5, 6.4))  # fixed positions: no layout engine to rerun on every redraw
    main_ax = fig.add_axes((0.085, 0.16, 0.40, 0.75))
    grid = fig.add_gridspec(num_layers, num_heads, left=0.53, right=0.99, bottom=0.17, top=0.89, wspace=0.12,
                            hspace=0.12)
    blank = torch.full((max_tokens, max_tokens), float("nan"))
    main = Heatmap(main_ax, blank, [""] * max_tokens, [""] * max_tokens, annotate=False, vmin=0.0, vmax=1.0,
                   colorbar_label="attention weight", xlabel="key token (looked at)", ylabel="query token (looking)")
    main_ax.set_facecolor("#f2f2f2")
    thumbs = []
    for l in range(num_layers):
        row = []
        for h in range(num_heads):
            ax = fig.add_subplot(grid[l, h])
            image = ax.imshow(torch.zeros(2, 2).numpy(), vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest",
                              aspect="auto")
            ax.set_xticks([])
            ax.set_yticks([])
            if l == 0:
                ax.set_title(str(h), fontsize=8)
            if h == 0:
                ax.set_ylabel(f"layer {l}", fontsize=8)
            row.append((ax, image))
        thumbs.append(row)
    frame = [None]
    box = widgets.Text(value=text, description="your sentence (Enter)", style={"description_width": "initial"},
                       layout=widgets.Layout(width="560px"), continuous_update=False)

    def redraw(text: str, layer: int, head: int) -> None:
        reading = read_sentence(encoder, tokenizer, text)
        tokens, weights = reading.tokens, reading.attn_weights  # (L, H, T, T)
        cut = len(tokens) > max_tokens
        if cut:
            tokens, weights = tokens[:max_tokens], weights[:, :, :max_tokens, :max_tokens]
        num_tokens = len(tokens)
        shown = blank.clone()
        shown[:num_tokens, :num_tokens] = weights[layer, head]
        labels = tokens + [""] * (max_tokens - num_tokens)
        size = 9 if num_tokens <= 16 else 7.5 if num_tokens <= 24 else 6.5
        main.update(shown, title=f"L{layer}H{head}: where each token looks"
                                 + (f"\n(only the first {max_tokens} tokens are shown)" if cut else ""))
        main_ax.set_xticks(range(max_tokens), labels=labels, rotation=90, ha="right", va="center", fontsize=size,
                           rotation_mode="anchor")
        main_ax.set_yticks(range(max_tokens), labels=labels, fontsize=size)
        main_ax.set_xlim(-0.5, num_tokens - 0.5)
        main_ax.set_ylim(num_tokens - 0.5, -0.5)
        for l in range(num_layers):
            for h in range(num_heads):
                ax, image = thumbs[l][h]
                image.set_data(weights[l, h].numpy())
                image.set_extent((-0.5, num_tokens - 0.5, num_tokens - 0.5, -0.5))
                chosen = (l, h) == (layer, head)
                for spine in ax.spines.values():
                    spine.set_edgecolor("red" if chosen else "black")
                    spine.set_linewidth(2.5 if chosen else 0.5)
        fig.suptitle(f"{num_tokens} tokens · right: all {num_layers * num_heads} heads (rows: layers 0-"
                     f"{num_layers - 1}, columns: heads 0-{num_heads - 1}; same 0-1 colour scale)", fontsize=10)

    controls = {"text": box, "layer": choice("layer", list(range(num_layers)), layer),
                "head": int_slider("head", head, 0, num_heads - 1)}
    return LiveFigure(fig, redraw, controls)


def pronoun_rows(encoder: MiniLMEncoder, tokenizer, template: str, pronoun: str, words: tuple[str, str],
                 heads: list[tuple[int, int]]) -> CourseFigure:
    """One panel per ``(layer, head)``: the weights of ``pronoun``'s row over every token, as bars, for
    ``template.format(words[0])`` and ``template.format(words[1])`` side by side (the two sentences must have the
    same number of tokens; the tick of the token that differs names both words)."""
    readings = [read_sentence(encoder, tokenizer, template.format(word)) for word in words]
    if len(readings[0].tokens) != len(readings[1].tokens):
        raise ValueError(f"words must give sentences of the same length in tokens, got {readings[0].tokens} and "
                         f"{readings[1].tokens}")
    labels = [a if a == b else f"{a}/{b}" for a, b in zip(readings[0].tokens, readings[1].tokens)]
    num_tokens = len(labels)
    fig = CourseFigure(figsize=(4.6 * len(heads) + 0.4, 3.4), layout="constrained")
    axes = fig.subplots(1, len(heads), squeeze=False, sharey=True)[0]
    for ax, (layer, head) in zip(axes, heads):
        for k, (reading, word, color) in enumerate(zip(readings, words, ("tab:blue", "tab:orange"))):
            row = reading.attn_weights[layer, head, word_positions(tokenizer, reading.tokens, pronoun)[0]]
            ax.bar([i + (k - 0.5) * 0.4 for i in range(num_tokens)], row.tolist(), width=0.4, color=color,
                   label=f"with '{word}'")
        ax.set_xticks(range(num_tokens), labels=labels, rotation=90, fontsize=8)
        ax.set(title=f"L{layer}H{head}: where '{pronoun}' looks", ylim=(0, 1))
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"attention weight of '{pronoun}'")
    axes[-1].legend(fontsize=8, loc="upper left")
    return fig


def bank_curves(within: torch.Tensor, across: torch.Tensor, title: str) -> CourseFigure:
    """Cosines of a word's vectors after the embeddings and each layer, ``(L+1, pairs)`` each: the mean of
    ``within`` (pairs of the same meaning) and of ``across`` (pairs of different meanings), each with a band from its
    lowest to its highest pair. The x ticks read emb, L0, L1, ..."""
    within, across = torch.as_tensor(within), torch.as_tensor(across)
    if within.ndim != 2 or across.ndim != 2 or within.shape[0] != across.shape[0]:
        raise ValueError(f"within and across must be (L+1, pairs) with the same L+1, got {tuple(within.shape)} and "
                         f"{tuple(across.shape)}")
    steps = within.shape[0]
    fig = CourseFigure(figsize=(6.4, 3.4), layout="constrained")
    ax = fig.add_subplot()
    for name, values, color in (("same meaning", within, "tab:blue"), ("different meanings", across, "tab:red")):
        ax.plot(range(steps), values.mean(1), color=color, marker="o", label=f"{name} (mean; band: lowest to highest)")
        ax.fill_between(range(steps), values.min(1).values, values.max(1).values, color=color, alpha=0.2)
    low = float(min(within.min(), across.min()))
    ax.set(xlabel="after", ylabel="cosine of the two vectors", ylim=(min(0.6, low - 0.02), 1.01), title=title,
           xticks=range(steps), xticklabels=["emb"] + [f"L{n}" for n in range(steps - 1)])
    ax.legend(fontsize=8, loc="lower left")
    return fig
