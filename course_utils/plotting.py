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
    """The course pipeline as boxes and arrows: Pretrain -> SFT -> RLHF family -> R1 -> distillation.

    Box labels are ``course.NOTEBOOKS``' numbers and short names; a planned notebook
    (``built=False``) gets a dashed box. Notebook 00 (this map) has no box. Notebooks 05-08 share
    one shaded group with one arrow from 02: 05-07 start from its stage ``sft_cold``, and 08 (which
    rebuilds its pipeline from the pretrained base) measures its result against it.
    """
    from .course import NOTEBOOKS

    # the layout, keyed by notebook number (labels come from NOTEBOOKS): number -> (x, y, colour, note)
    layout = {
        "01": (0.5, 1.0, "#cfe2f3", ""), "02": (2.2, 1.0, "#cfe2f3", ""),
        "03": (4.1, 2.0, "#fce5cd", ""), "04": (4.1, 0.0, "#eeeeee", ""),
        "05": (6.0, 2.0, "#fce5cd", "RM + critic"), "06": (6.0, 1.0, "#d9ead3", "no RM, no sampling"),
        "07": (6.0, 0.0, "#ead1dc", "group advantage,\nno critic"), "08": (8.0, 0.5, "#ead1dc", ""),
        "09": (9.9, 0.5, "#d9d2e9", ""), "10": (9.9, 1.6, "#d9d2e9", "pass@k, best-of-n"),
        "11": (8.0, -0.8, "#ead1dc", "unsloth + vLLM"), "12": (9.9, -0.8, "#ead1dc", "tool calls"),
        "13": (8.0, -1.75, "#ead1dc", "sick runs"),
    }
    # 02 -> 05..08 is one arrow into the shaded group below (05-07 start from sft_cold, 08 measures against it)
    arrows = [("01", "02"), ("02", "03"), ("03", "05"), ("07", "08"),
              ("08", "09"), ("08", "10"), ("04", "05"), ("04", "07"), ("07", "11"),
              ("07", "12"), ("07", "13")]
    fig, ax = _ax(ax, figsize=(11, 4.8))
    boxes = {}
    for nb in NOTEBOOKS:
        if nb.number not in layout:
            continue
        x, y, colour, note = layout[nb.number]
        label = f"{nb.number} {nb.short}" + (f"\n({note})" if note else "")
        boxes[nb.number] = ax.text(x, y, label, ha="center", va="center", fontsize=8.5,
                                   bbox=dict(boxstyle="round,pad=0.4", fc=colour, ec="#555555",
                                             linestyle="-" if nb.built else "--"))
    for a, b in arrows:
        if a in boxes and b in boxes:  # from the right edge of box a to the left edge of box b
            ax.annotate("", xy=(0, 0.5), xycoords=boxes[b], xytext=(1, 0.5), textcoords=boxes[a],
                        arrowprops=dict(arrowstyle="->", color="#555555", shrinkA=7, shrinkB=7))
    # 05, 06 and 07 start from 02's stage sft_cold (05 also uses 03's reward model), 08 measures against it: one group
    group = ax.add_patch(plt.Rectangle((5.15, -0.45), 3.6, 2.9, fc="#f6f6f6", ec="#999999", ls=":", zorder=0))
    ax.annotate("", xy=(0, 0.5), xycoords=group, xytext=(1, 0.5), textcoords=boxes["02"],
                arrowprops=dict(arrowstyle="->", color="#555555", shrinkA=7, shrinkB=2))
    ax.text(3.9, 1.08, "sft_cold", ha="center", fontsize=7.5, style="italic", color="#555555")
    ax.text(8.7, 2.3, "05–07 start from\n02's sft_cold;\n08 measures against it", ha="right", va="top", fontsize=7.5,
            style="italic", color="#555555")
    ax.text(6.0, 2.75, "RLHF family", ha="center", fontsize=9, style="italic")
    if any(not nb.built for nb in NOTEBOOKS if nb.number in layout):   # a legend only while a box is dashed
        ax.text(10.9, -2.1, "dashed box: coming", ha="right", fontsize=8, color="#555555")
    ax.set_xlim(-0.4, 10.9)
    ax.set_ylim(-2.2, 3.0)
    ax.axis("off")
    ax.set_title(title)
    fig.tight_layout()
    return fig, ax


def plot_run_panels(histories: Mapping[str, Sequence[Mapping[str, float]]], keys: Mapping[str, str],
                    ncols: int = 4, window: int = 1, title: str = ""):
    """Small multiples of an RL run's log: one panel per ``keys`` entry (log key → panel title).

    ``histories`` maps a run's name to its list of per-step dicts (each with ``"step"``),
    so several runs share every panel. Returns ``(fig, axes)``.
    """
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.4 * nrows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, keys.items()):
        for name, history in histories.items():
            steps = [h["step"] for h in history if key in h]
            ax.plot(steps, smooth([h[key] for h in history if key in h], window), label=name)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    if len(histories) > 1:
        axes.flat[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig, axes


def _wilson_errors(acc: np.ndarray, n_problems: int) -> np.ndarray:
    """``(2, len(acc))`` error-bar lengths below and above each accuracy: its 95% Wilson interval. At 0% or 100% a bound
    equals the value up to rounding, so the lengths are clipped at 0 (matplotlib refuses a negative one)."""
    from .evaluation import wilson_interval
    lo, hi = (np.array(bound) for bound in zip(*(wilson_interval(a * n_problems, n_problems) for a in acc)))
    return np.clip([acc - lo, hi - acc], 0.0, None)


def plot_accuracy_curves(curves: Mapping[str, Mapping[int, float]], n_problems: int, ax=None, x_scale=1.0,
                         xlabel: str = "N (answers per question)", title: str = "", baselines=None,
                         colors: Mapping[str, str] | None = None):
    """Accuracy against N, one line per method, each point with its 95% Wilson interval.

    ``curves`` maps a method to ``{N: accuracy}``; ``x_scale`` multiplies N (e.g. by the
    mean tokens per answer, to plot against generated tokens; a mapping gives one factor
    per method); ``baselines`` maps a label to a flat line (e.g. greedy decoding);
    ``colors`` keeps a method's colour the same across plots.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.6))
    ax.set_xscale("log", base=2)
    for name, points in curves.items():
        ns = sorted(points)
        acc = np.array([points[n] for n in ns])
        scale = x_scale[name] if isinstance(x_scale, Mapping) else x_scale
        ax.errorbar(np.array(ns, dtype=float) * scale, acc, yerr=_wilson_errors(acc, n_problems),
                    marker="o", ms=3, capsize=2, label=name, color=(colors or {}).get(name))
    for label, value in (baselines or {}).items():
        ax.axhline(value, ls="--", color="grey", lw=1)
        ax.annotate(label, xy=(0.01, value), xycoords=("axes fraction", "data"), xytext=(2, 3),
                    textcoords="offset points", fontsize=8, color="grey")
    ax.set(xlabel=xlabel, ylabel="accuracy", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_timed_curves(curves: Mapping[str, Sequence[tuple[float, int, float]]], n_problems: int, ax=None,
                      title: str = "", baselines: Mapping[str, float] | None = None):
    """Held-out accuracy against training seconds, one line per run, each point with its 95% Wilson interval.

    ``curves`` maps a run to its ``(seconds, step, accuracy)`` points (``training.TimedCurveCallback.curve``);
    ``n_problems`` is how many problems each accuracy was measured on; ``baselines`` maps a label to a flat line
    (e.g. the teacher). Returns ``(fig, ax)``.
    """
    fig, ax = _ax(ax, figsize=(6.5, 3.8))
    for name, points in curves.items():
        seconds, _, acc = (np.array(column, dtype=float) for column in zip(*points))
        ax.errorbar(seconds, acc, yerr=_wilson_errors(acc, n_problems), marker="o", ms=3, capsize=2, label=name)
    for label, value in (baselines or {}).items():
        ax.axhline(value, ls="--", color="grey", lw=1)
        ax.annotate(label, xy=(0.01, value), xycoords=("axes fraction", "data"), xytext=(2, -10),
                    textcoords="offset points", fontsize=8, color="grey")
    ax.set(xlabel="training seconds (sampling included; measurements left out)", ylabel="held-out accuracy",
           title=title, ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig, ax


def plot_log_ratios(log_ratios: Mapping[str, "torch.Tensor"], clip: tuple[float, float] = (0.8, 1.2), limit: float = 3.0,
                    title: str = "", ax=None):
    """Step histograms of per-token log-ratios (``stale_rollouts.log_ratios_by_lag``), one per sampler, on a log
    count axis, clamped to ±``limit``, with the log of PPO's ``clip`` range dotted. Returns ``(fig, ax)``."""
    fig, ax = _ax(ax, figsize=(7, 3.2))
    edges = np.linspace(-limit, limit, 121)
    for name, r in log_ratios.items():
        ax.hist(np.clip(np.asarray(r, dtype=float), -limit, limit), bins=edges, histtype="step", label=name, lw=1.5)
    for x in clip:
        ax.axvline(math.log(x), color="gray", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set(xlabel=f"log π_train / π_sample per token (clamped to ±{limit:g}; dotted: PPO's clip range)",
           ylabel="tokens", title=title)
    ax.legend(fontsize=8)
    return fig, ax
