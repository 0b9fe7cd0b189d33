"""The course's progress bars: a widget in a live notebook, a text bar where the notebook runs headless.

A widget bar saved in an executed notebook shows whatever its text fallback said when it was drawn ("PPO: 0% 0/50"),
and the page that reads that copy (the book, ``build/html``) shows a loop that never ran. ``make course`` and
``make test`` run the notebooks headless and set ``COURSE_TEXT_PROGRESS=1``: the bar is then plain text on stdout,
redrawn with carriage returns, whose last state is what the executed copy shows. Elsewhere it is ``tqdm.auto``.
"""
from __future__ import annotations

import os
import sys

TEXT_PROGRESS_ENV = "COURSE_TEXT_PROGRESS"
TEXT_MIN_INTERVAL_S = 2.0
"""a text bar redraws at most this often: each redraw is kept in the executed copy's stream"""


def text_mode() -> bool:
    """True where :data:`TEXT_PROGRESS_ENV` is set to a non-empty value other than ``0``."""
    return os.environ.get(TEXT_PROGRESS_ENV, "") not in ("", "0")


def tqdm(iterable=None, **kwargs):
    """``tqdm.auto.tqdm(iterable, **kwargs)``, or a text bar on stdout in :func:`text_mode`."""
    if text_mode():
        from tqdm.std import tqdm as bar
        kwargs.setdefault("file", sys.stdout)
        kwargs.setdefault("mininterval", TEXT_MIN_INTERVAL_S)
        kwargs.setdefault("ascii", False)
    else:
        from tqdm.auto import tqdm as bar
    return bar(iterable, **kwargs)


def trange(n: int, **kwargs):
    """:func:`tqdm` over ``range(n)``."""
    return tqdm(range(n), **kwargs)
