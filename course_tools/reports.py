"""The course run's reports: ``build/RESULTS.md``'s table of every notebook's results record, and the budget report
(each notebook's seconds against its budget, normalised by this machine's matmul rate)."""
from __future__ import annotations

import json

from course_utils.environment import environment_markdown
from course_utils.results import record_value
from course_utils.show import markdown_rows


def results_markdown(records: list[dict], runner_stats: dict | None = None) -> str:
    """A Markdown table: stage, metric, before, after, seconds, peak RAM."""
    runner_stats = runner_stats or {}
    rows = []
    for rec in records:
        nb = rec["notebook"]
        secs = runner_stats.get(nb, {}).get("seconds", rec.get("seconds"))
        for i, (name, pair) in enumerate(sorted(rec["metrics"].items())):
            tail = ((f"{secs:.0f}", f"{rec.get('peak_ram_mb', float('nan')):.0f}", str(rec["seed"]),
                     rec.get("profile", "")) if i == 0 else ("", "", "", ""))
            rows.append((nb if i == 0 else "", name, f"{pair['before']:.4g}", f"{pair['after']:.4g}", *tail))
    headers = ("notebook", "metric", "before", "after", "seconds", "peak RAM (MiB)", "seed", "profile")
    lines = ["# Course results", "", "Measured by the notebooks themselves (held-out data; before vs after).", "",
             markdown_rows(headers, rows)]
    envs = {json.dumps(rec["environment"], sort_keys=True) for rec in records if rec.get("environment")}
    if envs:  # normally one; two when results files of different runs were mixed
        lines += ["", "Measured in:", ""] + [environment_markdown(json.loads(e)) for e in sorted(envs)]
    return "\n".join(lines) + "\n"


# The matmul rate (1024² float32, 2 threads; ``course_tools.bench``) of the reference machine: the slow kind of CPU
# the budgets are set for. Seconds measured elsewhere are scaled to it (budget_report).
REFERENCE_GFLOPS = 70.0
COURSE_BUDGET_MINUTES = 30.0   # the whole course on such a machine
NOTEBOOK_BUDGET_MINUTES = 5.0  # any one notebook


SCALING_CAVEAT = (
    "The scaled figures lean pessimistic on a machine faster than the reference: the tiny model's work is mostly "
    "per-token overhead, which speeds up less than matmul (a whole `make course` run's seconds fall about as "
    "rate^-0.7, not rate^-1). The total adds the notebooks' "
    "seconds; where two ran side by side the course's wall time is shorter.")


def time_breakdown(record: dict, top: int = 4) -> str:
    """Where a notebook's seconds went: its ``top`` longest timed blocks, as ``"name 116 s (22%)"`` joined by commas.

    The blocks are the notebook's ``experiment.Runs.timed`` ones, kept in its results record (``extra["runs"]``,
    each run's ``seconds``); a share is of the record's own ``seconds``. Blocks can nest (10 times a judge's
    critiques inside its run), so the shares need not add up. ``""`` for a record without timed blocks.
    """
    runs = record_value(record, "extra", "runs") or {}
    timed = sorted(((row["seconds"], name) for name, row in runs.items()
                    if isinstance(row, dict) and isinstance(row.get("seconds"), (int, float))), reverse=True)
    total = record.get("seconds") or 0.0
    return ", ".join(f"{name} {secs:.0f} s" + (f" ({secs / total:.0%})" if total > 0 else "")
                     for secs, name in timed[:top])


def budget_report(seconds: dict[str, float], gflops: float | None = None, records: list[dict] | None = None) -> str:
    """Each notebook's seconds against its budget, as a Markdown table with the total (a report, never a failure).

    ``seconds`` maps a notebook name (``"05_ppo"``) to its wall seconds on this machine;
    ``gflops`` is this machine's matmul rate (``bench.matmul_gflops``), which turns them into
    seconds on the reference machine (:data:`REFERENCE_GFLOPS`): ``seconds * gflops / REFERENCE_GFLOPS``,
    so a budget that slips shows on a fast machine too. A notebook's budget is its ``cpu_minutes``
    in the course map (``course.NOTEBOOKS``), capped at :data:`NOTEBOOK_BUDGET_MINUTES`. With the
    notebooks' results ``records``, each notebook over its budget gets a line below the table with its
    longest timed blocks (:func:`time_breakdown`): where a cut would have to come from.
    """
    from course_utils.course import NOTEBOOKS

    scale = gflops / REFERENCE_GFLOPS if gflops else 1.0
    minutes = {nb.name: nb.cpu_minutes for nb in NOTEBOOKS}
    rows = []
    total = total_ref = 0.0
    over = set()
    for name, secs in sorted(seconds.items()):
        budget = min(minutes.get(name) or NOTEBOOK_BUDGET_MINUTES, NOTEBOOK_BUDGET_MINUTES) * 60
        ref = secs * scale
        total, total_ref = total + secs, total_ref + ref
        if ref > budget:
            over.add(name)
        rows.append((name, f"{secs:.0f}", f"{ref:.0f}", f"{budget:.0f}", "over" if name in over else "ok"))
    course = COURSE_BUDGET_MINUTES * 60
    rows.append(("**total**", f"{total:.0f}", f"{total_ref:.0f}", f"{course:.0f}",
                 "over" if total_ref > course else "ok"))
    headers = ("notebook", "seconds here", "on the reference machine", "budget (s)", "")
    table = markdown_rows(headers, rows)
    head = (f"Budgets: this machine's matmul rate is {gflops:.0f} GFLOP/s against the reference machine's "
            f"{REFERENCE_GFLOPS:.0f}, so its seconds are scaled by {scale:.2f}. {SCALING_CAVEAT}" if gflops else
            "Budgets (seconds not normalised: no matmul figure).")
    blocks = {rec["notebook"]: (rec["seconds"], time_breakdown(rec)) for rec in records or []
              if rec.get("notebook") in over}
    where = [f"- {name} ({secs:.0f} s of its own clock): {line}" for name, (secs, line) in sorted(blocks.items()) if line]
    tail = ("\n\nWhere the notebooks over budget spend their time (their longest timed blocks, from their results "
            "records):\n\n" + "\n".join(where)) if where else ""
    return head + "\n\n" + table + tail + "\n"
