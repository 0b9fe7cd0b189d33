"""What a notebook cell shows: a from-scratch result compared with the library's (:func:`compare`), a function's
source (:func:`show_source`), Markdown (:func:`show_markdown`) and a table from columns (:func:`markdown_table`) or
from rows (:func:`markdown_rows`)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def compare(name: str, ours, reference, atol: float = 1e-6, rtol: float = 1e-5) -> float:
    """Print how close ``ours`` is to ``reference`` and assert they agree.

    Prints ``name | exact | approximate | maxdiff`` (Karpathy's ``cmp`` habit) and
    raises ``AssertionError`` if ``|ours - reference| > atol + rtol * |reference|``
    anywhere. Returns the max absolute difference.
    """
    import torch   # here, not at the top: the tables (course.notebook_table, the reports) need no torch

    ours_t = torch.as_tensor(ours).detach().cpu()
    ref_t = torch.as_tensor(reference).detach().cpu()
    if ours_t.shape != ref_t.shape:
        raise AssertionError(f"{name}: shapes differ, ours {tuple(ours_t.shape)} vs reference {tuple(ref_t.shape)}")
    dtype = torch.promote_types(ours_t.dtype, ref_t.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float64
    ours_t, ref_t = ours_t.to(dtype), ref_t.to(dtype)
    if torch.isnan(ours_t).any() or torch.isnan(ref_t).any():
        raise AssertionError(f"{name}: NaN in {'ours' if torch.isnan(ours_t).any() else 'reference'}")
    exact = bool(torch.equal(ours_t, ref_t))
    maxdiff = float((ours_t - ref_t).abs().max()) if ours_t.numel() else 0.0
    close = bool(torch.allclose(ours_t, ref_t, atol=atol, rtol=rtol))
    print(f"{name:32s} | exact: {str(exact):5s} | approximate: {str(close):5s} | maxdiff: {maxdiff:.3e}")
    assert close, f"{name}: max abs diff {maxdiff:.3e} exceeds atol={atol}, rtol={rtol}"
    return maxdiff


def show_source(obj, title: str | None = None) -> str:
    """Show the source of a package function or class where the lesson needs it.

    In a notebook it renders as highlighted Python (a Markdown code block) headed by
    the object's dotted name; elsewhere it prints. Returns the source text, so a
    test or an exercise can inspect it.
    """
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(obj))
    name = title or f"{obj.__module__}.{obj.__qualname__}"
    show_markdown(f"`{name}`\n\n```python\n{source}```", plain=f"# {name}\n{source}")
    return source


def show_markdown(text: str, plain: str | None = None) -> None:
    """Render Markdown in a notebook; print ``plain`` (default: the text) anywhere else."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
        if get_ipython() is None:
            raise ImportError
    except ImportError:
        print(text if plain is None else plain)
    else:
        display(Markdown(text))


def _markdown_cell(value) -> str:
    if hasattr(value, "item") and not isinstance(value, str):   # a one-element tensor or a numpy scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value).replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")
    if isinstance(value, float) and math.isnan(value):
        return "–"
    return f"{value:.3g}"


def markdown_table(columns: Mapping[str, Sequence], index: Sequence | None = None, index_header: str = "") -> str:
    """A Markdown table from ``{header: values}``, the columns of equal length, one row per position (for tables
    that are not runs; :meth:`Runs.table` tabulates runs).

    ``index`` (optional) is a first column headed ``index_header``. Numbers (tensors' items too) print with three
    significant digits; anything else as text, with ``|`` escaped and ``<`` written ``&lt;``, so a completion's
    ``<think>`` tags show instead of being read as HTML.
    """
    columns = {header: list(values) for header, values in columns.items()}
    if index is not None:
        columns = {index_header: list(index), **columns}
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"columns of different lengths: { {h: len(v) for h, v in columns.items()} }")
    lines = ["| " + " | ".join(_markdown_cell(h) for h in columns) + " |", "|" + "---|" * len(columns)]
    for row in zip(*columns.values()):
        lines.append("| " + " | ".join(_markdown_cell(v) for v in row) + " |")
    return "\n".join(lines)


def markdown_rows(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    """:func:`markdown_table` from rows: ``headers`` and one sequence of cells per row (a header-only table for none);
    for tables built a row at a time."""
    rows = [list(row) for row in rows]
    if any(len(row) != len(headers) for row in rows):
        raise ValueError(f"{len(headers)} headers but rows of {sorted({len(row) for row in rows})} cells")
    if len(set(headers)) != len(headers):
        raise ValueError(f"repeated headers: {list(headers)}")
    return markdown_table({header: [row[j] for row in rows] for j, header in enumerate(headers)})
