"""Plots the notebooks share. Every function returns ``(fig, ax)`` and draws nothing else."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np


def _ax(ax=None, figsize=(6, 3.5)):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
    else:
        fig = ax.figure
    return fig, ax


def smooth(values: Sequence[float], window: int = 1) -> np.ndarray:
    """Trailing moving average (``window=1`` returns the values unchanged)."""
    v = np.asarray(values, dtype=float)
    if window <= 1 or len(v) == 0:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))
    out = np.empty_like(v)
    for i in range(len(v)):
        lo = max(0, i + 1 - window)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def history_series(log_history: list[dict], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of ``key`` from a Trainer's ``state.log_history``."""
    pairs = [(h["step"], h[key]) for h in log_history if key in h and "step" in h]
    return [p[0] for p in pairs], [float(p[1]) for p in pairs]


def plot_curves(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str = "",
                xlabel: str = "step", ylabel: str = "loss", logy: bool = False, window: int = 1,
                baselines: Mapping[str, float] | None = None, ax=None):
    """Line plot of named ``(x, y)`` curves, optional horizontal baselines."""
    fig, ax = _ax(ax)
    for name, (x, y) in curves.items():
        ax.plot(list(x), smooth(y, window), label=name)
    for name, value in (baselines or {}).items():
        ax.axhline(value, linestyle="--", linewidth=1, color="gray")
        ax.annotate(name, xy=(ax.get_xlim()[0], value), xytext=(4, 3), textcoords="offset points",
                    fontsize=8, color="gray")
    if logy:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig, ax


def plot_before_after(metrics: Mapping[str, Mapping[str, float]], title: str = "Before vs after",
                      ax=None):
    """Grouped bars of ``{metric: {"before": x, "after": y}}``, values printed on top."""
    fig, ax = _ax(ax)
    names = list(metrics)
    x = np.arange(len(names))
    w = 0.38
    for offset, key, colour in ((-w / 2, "before", "#999999"), (w / 2, "after", "#1f77b4")):
        vals = [metrics[n][key] for n in names]
        bars = ax.bar(x + offset, vals, w, label=key, color=colour)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in vals], fontsize=8, padding=2)
    ax.set_xticks(x, names)
    ax.set_title(title)
    ax.legend()
    ax.margins(y=0.15)
    fig.tight_layout()
    return fig, ax


def plot_histograms(groups: Mapping[str, Sequence[float]], bins: int = 30, title: str = "",
                    xlabel: str = "value", ax=None):
    """Overlaid histograms of named groups of values (e.g. chosen vs rejected rewards)."""
    fig, ax = _ax(ax)
    all_vals = np.concatenate([np.asarray(v, dtype=float) for v in groups.values()])
    edges = np.linspace(all_vals.min(), all_vals.max() + 1e-9, bins + 1)
    for name, vals in groups.items():
        ax.hist(vals, bins=edges, alpha=0.55, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel="count")
    ax.legend()
    fig.tight_layout()
    return fig, ax


def plot_token_mask(tokens: Sequence[str], mask: Sequence[int], title: str = "Which tokens are trained",
                    per_row: int = 16, ax=None):
    """Tokens as coloured boxes: trained (mask 1) in blue, ignored (mask 0) in grey."""
    rows = math.ceil(len(tokens) / per_row)
    fig, ax = _ax(ax, figsize=(per_row * 0.75, 0.5 * rows + 0.6))
    for i, (tok, m) in enumerate(zip(tokens, mask)):
        r, c = divmod(i, per_row)
        ax.add_patch(plt.Rectangle((c, -r), 0.95, 0.9, color="#1f77b4" if m else "#dddddd"))
        ax.text(c + 0.47, -r + 0.45, tok.replace("\n", "\\n"), ha="center", va="center", fontsize=7,
                color="white" if m else "black")
    ax.set_xlim(0, per_row)
    ax.set_ylim(-rows + 0.9, 1)
    ax.axis("off")
    ax.set_title(title)
    fig.tight_layout()
    return fig, ax


def plot_pipeline(title: str = "Where each notebook sits", ax=None):
    """The course pipeline as boxes and arrows: Pretrain -> SFT -> RLHF family -> R1 -> distillation."""
    fig, ax = _ax(ax, figsize=(11, 3.6))
    boxes = {  # name: (x, y, colour)
        "01 Pretrain": (0.5, 1.0, "#cfe2f3"), "02 SFT": (2.2, 1.0, "#cfe2f3"),
        "03 Reward model": (4.1, 2.0, "#fce5cd"), "05 PPO\n(RM + critic)": (6.0, 2.0, "#fce5cd"),
        "06 DPO\n(no RM, no sampling)": (6.0, 1.0, "#d9ead3"), "07 GRPO\n(group advantage)": (6.0, 0.0, "#ead1dc"),
        "08 R1 pipeline": (8.0, 0.5, "#ead1dc"), "09 Distillation": (9.9, 0.5, "#d9d2e9"),
        "04 RL foundations": (4.1, 0.0, "#eeeeee"),
    }
    for name, (x, y, colour) in boxes.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=8.5,
                bbox=dict(boxstyle="round,pad=0.4", fc=colour, ec="#555555"))
    arrows = [("01 Pretrain", "02 SFT"), ("02 SFT", "03 Reward model"),
              ("03 Reward model", "05 PPO\n(RM + critic)"), ("02 SFT", "06 DPO\n(no RM, no sampling)"),
              ("02 SFT", "07 GRPO\n(group advantage)"), ("07 GRPO\n(group advantage)", "08 R1 pipeline"),
              ("08 R1 pipeline", "09 Distillation"), ("04 RL foundations", "05 PPO\n(RM + critic)"),
              ("04 RL foundations", "07 GRPO\n(group advantage)")]
    for a, b in arrows:
        (x0, y0, _), (x1, y1, _) = boxes[a], boxes[b]
        ax.annotate("", xy=(x1 - 0.75, y1), xytext=(x0 + 0.75, y0),
                    arrowprops=dict(arrowstyle="->", color="#555555", shrinkA=4, shrinkB=4))
    ax.text(6.0, 2.75, "RLHF family", ha="center", fontsize=9, style="italic")
    ax.set_xlim(-0.4, 10.9)
    ax.set_ylim(-0.6, 3.0)
    ax.axis("off")
    ax.set_title(title)
    fig.tight_layout()
    return fig, ax
