"""Run the course once per seed and tabulate every recorded metric across the seeds.

``make seeds SEEDS="1234 7 3"`` (``python -m course_tools.seeds 1234 7 3``) runs the whole
course (``course_tools.runner``) once per seed, each in its own artifacts folder
(``artifacts/seeds/s<seed>/``: stages of one seed never meet another's) and build folder
(``build/seeds/s<seed>/``), then writes ``build/SEEDS.md``: for every notebook and metric, the
before and after values at each seed, with their min–max, and the environment they were
measured in, and the course's results table (:data:`RESULTS_ROWS`, one column per seed) into ``docs/results.md``,
between its two markers (:func:`write_results_table`). The notebooks' measured ranges come from it.

``python -m course_tools.seeds --report-only 1234 7`` re-tabulates finished runs.

The check cells' lines are read back from each seed's executed notebooks (:func:`check_lines`) into a second table of
the same page (:func:`margins_table`): for every check condition, the seeds it held at and its thinnest margin.

Each finished seed's results records are also kept in the repository, under ``docs/seeds/s<seed>/`` (``--keep``;
:func:`keep_records`), with the seed's ``RESULTS.md`` (its failures) and its check lines (``checks.json``): the record
outlives the artifacts folder, so seeds run on different days (or machines, which the records name) tabulate
together. ``--report-only`` reads a seed's artifacts folder where it has one and its kept records otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from course_utils.environment import environment_markdown
from course_utils.paths import repo_root
from course_utils.results import before_after, load_results, record_value
from course_utils.show import markdown_rows


def keep_records(seed: int, art: Path, out: Path, keep: Path) -> Path:
    """Copy seed ``seed``'s results records (``art/results/*.json``) and its ``RESULTS.md`` (in ``out``) to
    ``keep/s<seed>/``, with its check lines (:func:`check_lines` of ``out/notebooks``) as :data:`CHECKS_FILE`,
    replacing what an earlier run of that seed kept there."""
    import shutil
    dest = keep / f"s{seed}"
    if dest.is_dir():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for record in sorted((art / "results").glob("*.json")):
        shutil.copy2(record, dest / record.name)
    if (out / "RESULTS.md").is_file():
        shutil.copy2(out / "RESULTS.md", dest / "RESULTS.md")
    if (out / "notebooks").is_dir():
        (dest / CHECKS_FILE).write_text(json.dumps(check_lines(out / "notebooks"), indent=1, ensure_ascii=False)
                                        + "\n", encoding="utf-8")
    return dest


CHECKS_FILE = "checks.json"
"""the kept file of a seed's check lines, per notebook (:func:`check_lines`)"""
_COMPARISON = re.compile(r"^(?P<name>.*): (?:(?P<before>.+?) → (?P<after>.+?); )?"
                         r"(?P<value>\S+) (?P<relation>[≥≤]) (?P<threshold>\S+)$")


def _number(text: str) -> float | None:
    """A figure as a check line prints it ("+18.0%", "0.519", "3") as a number (percentages as fractions)."""
    try:
        return float(text.rstrip("%")) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return None


def parse_check_line(line: str) -> dict | None:
    """One line of :class:`course_utils.experiment.Checks` (``✓ name: before → after; value ≥ threshold``, or a
    ``holds`` line, ``✓ name: detail``) as a dict: ``name``, ``ok``, and, for a comparison, ``value``, ``relation``,
    ``threshold`` (numbers), ``shown`` (the value and threshold as printed) and ``percent``; None for any other line."""
    line = line.rstrip()
    if not line.startswith(("✓ ", "✗ ")):
        return None
    ok, text = line[0] == "✓", line[2:].removesuffix("  (missed)")
    match = _COMPARISON.match(text)
    value, threshold = (_number(match["value"]), _number(match["threshold"])) if match else (None, None)
    if value is not None and threshold is not None:
        return {"name": _stable_name(match["name"]), "ok": ok, "value": value, "relation": match["relation"],
                "threshold": threshold, "shown": f"{match['value']} {match['relation']} {match['threshold']}",
                "percent": match["threshold"].endswith("%")}
    return {"name": _stable_name(_holds_name(text)), "ok": ok}


def _stable_name(name: str) -> str:
    """A condition's name without the counts some names carry ("problems fixed (108) minus ..."), so that one
    condition has one name at every seed."""
    return re.sub(r" \(\d+\)", "", name)


def _holds_name(text: str) -> str:
    """A ``holds`` line's name: the text before its detail, which follows the last ": " outside brackets."""
    depth, cut = 0, None
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0 and text.startswith(": ", i):
            cut = i
    return text if cut is None else text[:cut]


def check_lines(notebooks_dir: Path) -> dict[str, list[dict]]:
    """Every check condition of a run's executed notebooks (``notebooks_dir/NN_name.ipynb``), per notebook in course
    order: the check lines (:func:`parse_check_line`) printed by the cells that assert them (those that call
    ``checks.done()``)."""
    found: dict[str, list[dict]] = {}
    for path in sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        conditions = []
        for cell in nb.get("cells", []):
            source = "".join(cell.get("source", []))
            if cell.get("cell_type") != "code" or "checks.done()" not in source:
                continue
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream":
                    for line in "".join(output.get("text", [])).splitlines():
                        parsed = parse_check_line(line)
                        if parsed:
                            conditions.append(parsed)
        if conditions:
            found[path.stem] = conditions
    return found


def _margin(check: dict) -> float | None:
    """How far a comparison cleared its threshold, in its own units (negative: missed)."""
    if "value" not in check:
        return None
    return check["value"] - check["threshold"] if check["relation"] == "≥" else check["threshold"] - check["value"]


def _shown_margin(check: dict) -> str:
    margin = _margin(check)
    if margin is None:
        return "–"
    return f"{100 * margin:+.1f} pts" if check["percent"] else f"{margin:+.3g}"


def margins_table(checks: dict[int, dict[str, list[dict]]]) -> str:
    """One row per check condition across the seeds (``checks``: seed → :func:`check_lines`): how many seeds it held
    at, and the seed where it was thinnest, with that run's value against the threshold and the margin.

    The thinnest seed is the one with the smallest margin relative to the threshold's size (a margin of 2 points
    against 10 is thinner than 3 against 50)."""
    seeds = list(checks)
    order: dict[tuple[str, str], None] = {}
    for s in seeds:
        for nb, conditions in checks[s].items():
            for c in conditions:
                order.setdefault((nb, c["name"]), None)
    rows = []
    for nb, name in sorted(order, key=lambda key: key[0]):   # notebooks in course order, conditions as printed
        seen = {s: c for s in seeds for c in checks[s].get(nb, []) if c["name"] == name}
        held = sum(c["ok"] for c in seen.values())
        scored = {s: _margin(c) / max(abs(c["threshold"]), 1e-12) for s, c in seen.items() if _margin(c) is not None}
        if scored:
            worst = min(scored, key=scored.get)
            c = seen[worst]
            thinnest = f"{c['shown']} (seed {worst})"
            margin = _shown_margin(c)
        else:
            worst = next((s for s, c in seen.items() if not c["ok"]), None)
            thinnest, margin = ("–" if worst is None else f"missed at seed {worst}"), "–"
        rows.append((nb[:2], name, f"{held} / {len(seen)}", thinnest, margin))
    missed = [f"{nb[:2]} \"{c['name']}\" at seed {s}" for s in seeds for nb, conditions in checks[s].items()
              for c in conditions if not c["ok"]]
    count = f"{len(rows)} condition{'s' * (len(rows) != 1)}, seeds {', '.join(map(str, seeds))}"
    summary = f"**Missed:** {'; '.join(missed)}." if missed else f"**Every condition held at every seed** ({count})."
    return (markdown_rows(("#", "check", "held at", "thinnest: value against threshold", "margin"), rows)
            + f"\n\n{summary}\n")


def seed_folders(seed: int, artifacts: Path, build: Path) -> tuple[Path, Path]:
    """Where seed ``seed`` writes: its artifacts folder and its build folder."""
    return artifacts / "seeds" / f"s{seed}", build / "seeds" / f"s{seed}"


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def failed_notebooks(build_dir: Path) -> list[str]:
    """The notebooks a runner's ``RESULTS.md`` lists as failed (a check cell that raised records its figures first)."""
    report = build_dir / "RESULTS.md"
    if not report.is_file():
        return []
    for line in report.read_text(encoding="utf-8").splitlines():
        if line.startswith("**Failed:**"):
            return [name.strip() for name in line.removeprefix("**Failed:**").split(",") if name.strip()]
    return []


def seeds_markdown(records: dict[int, list[dict]], seconds: dict[int, float] | None = None,
                   failed: dict[int, list[str]] | None = None) -> str:
    """``build/SEEDS.md``: one row per notebook and metric, ``before → after`` per seed, and min–max.

    ``records`` maps a seed (in the order to show) to its results records (``results.load_results`` of that seed's
    folder). A metric a seed did not record (a notebook that failed) shows as ``–`` and is
    left out of the range.
    """
    seeds = list(records)  # in the order asked for
    if not seeds:
        raise ValueError("no seeds to tabulate")
    by_seed = {s: {r["notebook"]: r for r in records[s]} for s in seeds}
    notebooks = sorted({nb for recs in by_seed.values() for nb in recs})
    rows = []
    for nb in notebooks:
        names = sorted({m for s in seeds for m in by_seed[s].get(nb, {}).get("metrics", {})})
        for i, name in enumerate(names):
            cells, afters = [], []
            for s in seeds:
                pair = by_seed[s].get(nb, {}).get("metrics", {}).get(name)
                if pair is None:
                    cells.append("–")
                    continue
                cells.append(f"{_fmt(pair['before'])} → {_fmt(pair['after'])}")
                afters.append(pair["after"])
            span = f"{_fmt(min(afters))} – {_fmt(max(afters))}" if afters else "–"
            rows.append((nb if i == 0 else "", name, *cells, span))
    lines = ["# The course at several seeds", "",
             "Every before → after metric the notebooks recorded, per seed (held-out data), and the range of the "
             "'after' values across the seeds that recorded it. Made by `make seeds`.", "",
             markdown_rows(("notebook", "metric", *(f"seed {s}" for s in seeds), "after: min – max"), rows)]
    missing = [f"{nb} at seed {s}" for s in seeds for nb in notebooks if nb not in by_seed[s]]
    if missing:
        lines += ["", "**No record** (failed or not run): " + ", ".join(missing)]
    failures = [f"{nb} at seed {s}" for s in seeds for nb in (failed or {}).get(s, [])]
    if failures:
        lines += ["", "**Failed** (a cell raised, most often a check; its figures above were recorded before it): "
                  + ", ".join(failures)]
    totals = []
    for s in seeds:
        own = sum(r.get("runner", {}).get("seconds", r.get("seconds", 0.0)) for r in records[s])
        wall = f"; {seconds[s]:.0f} s wall" if seconds and s in seconds else ""
        totals.append((str(s), str(len(records[s])), f"{own:.0f}{wall}"))
    lines += ["", markdown_rows(("seed", "notebooks recorded", "seconds (sum of the notebooks' own)"), totals)]
    envs = sorted({json.dumps(r["environment"], sort_keys=True) for s in seeds for r in records[s]
                   if r.get("environment")})
    lines += ["", "Measured in:", ""] + [environment_markdown(json.loads(e)) for e in envs]
    return "\n".join(lines) + "\n"


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _score(record: dict | None, metric: str) -> str:
    pair = record_value(record, "metrics", metric)
    return "–" if pair is None else f"{pair['before']:.2f} → {pair['after']:.2f}"


def _after(record: dict | None, metric: str):
    return record_value(record, "metrics", metric, "after")


def _run(record: dict | None, name: str):
    return record_value(record, "extra", "runs", name, "accuracy")


def _slash(*values) -> str:
    return " / ".join(_pct(v) for v in values)


def _largest_n(curve: dict | None) -> str | None:
    return max(curve, key=int) if curve else None


def _curve(record: dict | None, *keys) -> str:
    """``curve[1] → curve[largest N]`` of a ``{N: accuracy}`` curve in the record's extra."""
    curve = record_value(record, "extra", *keys)
    if not curve:
        return "–"
    return f"{_pct(curve.get('1'))} → {_pct(curve[_largest_n(curve)])}"


RESULTS_ROWS: list[tuple[str, str, object]] = [
    ("02", "`sft_cold`, the RL notebooks' start (02 stops SFT at 40% validation accuracy)",
     lambda r: _pct(_after(r, "sft_cold_accuracy"))),
    ("05", "PPO against the rule-based verifier, {verifier_steps} steps", lambda r: before_after(r, "accuracy")),
    ("05", "PPO against 03's reward model, {rm_steps} steps, β = {rm_run_beta} (reward hacking): accuracy (RM score)",
     lambda r: f"{before_after(r, 'rm_run_accuracy')} ({_score(r, 'rm_run_score')})"),
    ("06", "DPO on self-generated pairs (right vs wrong answers of the policy, verifier-labelled), {runs[(b) self-generated pairs][steps]} steps",
     lambda r: before_after(r, "accuracy")),
    ("06", "DPO on the course's offline pairs (program-made flaws), {runs[(a) offline pairs][steps]} steps",
     lambda r: before_after(r, "offline_run_accuracy")),
    ("07", "GRPO (TRL `GRPOTrainer` + LoRA) against the verifier, {runs[GRPO (section 5)][steps]} steps",
     lambda r: before_after(r, "accuracy")),
    ("07", "GRPO against 03's reward model, {hack_steps} steps (reward hacking): accuracy (RM score)",
     lambda r: f"{before_after(r, 'hack_run_accuracy')} ({_score(r, 'hack_run_rm_score')})"),
    ("07", "GRPO / Dr. GRPO / DAPO / GSPO, {variant_steps} steps each",
     lambda r: _slash(*(_run(r, n) for n in ("GRPO", "Dr. GRPO", "DAPO", "GSPO")))),
    ("07", "GRPO {variant_steps} steps: on-policy / samples 8 steps stale / stale + TRL's correction",
     lambda r: _slash(*(record_value(r, "extra", "stale", k) for k in ("on_policy", "stale", "corrected")))),
    ("08", "R1 from the base: R1-Zero, cold start, reasoning RL, rejection sampling, SFT round 2, RL round 2; "
           "`sft_cold` → final", lambda r: before_after(r, "accuracy")),
    ("08", "R1 stages: R1-Zero / reasoning RL / SFT round 2 / RL round 2",
     lambda r: _slash(*(record_value(r, "extra", "stage_accuracy", k)
                        for k in ("R1-Zero", "reasoning RL", "SFT round 2", "RL round 2 (R1)")))),
    ("09", "a student with 17% of `sft`'s parameters, on the teacher's answers: the sequence-level start, then the "
           "final student", lambda r: f"{_pct(_after(r, 'sequence_kd_accuracy'))}, {_pct(_after(r, 'student_accuracy'))}"),
    ("09", "from that start, at equal time: SFT on the teacher's text / on-policy distillation (`DistillationTrainer`, "
           "reverse KL) / GRPO with the verifier",
     lambda r: f"{before_after(r, 'timed_sft_accuracy')} / {_pct(_after(r, 'opd_accuracy'))} / "
               f"{_pct(_after(r, 'timed_grpo_accuracy'))}"),
    ("10", "`sft_cold` at inference: majority vote N 1 → {largest_vote_n} / vote over 8 paraphrases vs greedy",
     lambda r: f"{_curve(r, 'curves', 'majority vote')} / {_pct(_after(r, 'paraphrase_vote_accuracy'))} vs "
               f"{_pct(record_value(r, 'extra', 'greedy_accuracy'))}"),
    ("10", "a generative judge on preference pairs, k 1 → {largest_grm_k} critiques", lambda r: before_after(r, "grm_accuracy")),
    ("11", "capstone, CPU path: the seed's Qwen3 GRPO recipe on the tiny Qwen3, primed → after GRPO",
     lambda r: before_after(r, "accuracy")),
    ("12", "agentic RL from the full `sft`: accuracy with the calculator, cold start → after GRPO (the model alone "
           "after)", lambda r: f"{before_after(r, 'tool_accuracy')} ({_pct(_after(r, 'alone_accuracy'))})"),
]
"""The results table of ``docs/results.md``: (notebook, what the row measured, the cell from that notebook's record).
A label's ``{name}`` is filled from the first seed's record (its ``extra``), so step counts come from the runs
themselves."""


def _label(label: str, record: dict | None) -> str:
    extra = dict(record_value(record, "extra") or {})
    extra["largest_vote_n"] = _largest_n(record_value(extra, "curves", "majority vote")) or "N"
    extra["largest_grm_k"] = _largest_n(record_value(extra, "grm_curves", "GRM vote")) or "k"

    def fill(match: "re.Match") -> str:
        keys = re.findall(r"[^\[\]]+", match.group(1))
        value = record_value(extra, *keys)
        return "?" if value is None else str(value)
    return re.sub(r"\{([^{}]+)\}", fill, label)


def results_table(records: dict[int, list[dict]]) -> str:
    """The results table (:data:`RESULTS_ROWS`), one column per seed, from the seeds' results records."""
    seeds = list(records)
    by_seed = {s: {r["notebook"][:2]: r for r in records[s]} for s in seeds}
    rows = []
    for number, label, cell in RESULTS_ROWS:
        first = next((by_seed[s][number] for s in seeds if number in by_seed[s]), None)
        rows.append((number, _label(label, first), *(cell(by_seed[s][number]) if number in by_seed[s] else "–"
                                                     for s in seeds)))
    rows.append(("–", "the commit the seed ran at (a column from before a recipe change measured the older recipe)",
                 *(_commit(records[s]) for s in seeds)))
    return markdown_rows(("#", "run", *(f"seed {s}" for s in seeds)), rows) + "\n"


def _commit(records: list[dict]) -> str:
    """The commit a seed's records were written at (the first one that names it), its first 7 characters, with
    ``-dirty`` kept: ``–`` where none names one."""
    commit = next((c for r in records if (c := r.get("environment", {}).get("commit"))), None)
    if not commit:
        return "–"
    head, dirty = commit.removesuffix("-dirty"), commit.endswith("-dirty")
    return f"`{head[:7]}{'-dirty' * dirty}`"


RESULTS_DOC = "docs/results.md"
"""where ``make seeds`` writes the results table, relative to the repository root"""
KEPT_RECORDS = "docs/seeds"
"""where each finished seed's records are kept, relative to the repository root (``--keep``)"""
TABLE_START = "<!-- make seeds writes the table below (course_tools/seeds.py); edit the rows there -->"
TABLE_END = "<!-- end of the table make seeds writes -->"


MARGINS_START = "<!-- make seeds writes the checks' margins below (course_tools/seeds.py: margins_table) -->"
MARGINS_END = "<!-- end of the margins make seeds writes -->"


def write_results_table(doc: Path, table: str, start: str = TABLE_START, end: str = TABLE_END) -> None:
    """Put ``table`` between ``doc``'s two markers (:data:`TABLE_START` and :data:`TABLE_END`, or ``start`` and
    ``end``), keeping the rest of it."""
    text = doc.read_text(encoding="utf-8")
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"{doc}: expected one {start!r} and one {end!r}")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    doc.write_text(f"{head}{start}\n{table}{end}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    root = repo_root() or Path.cwd()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", nargs="+", type=int)
    parser.add_argument("--artifacts", default=str(root / "artifacts"))
    parser.add_argument("--build", default=str(root / "build"))
    parser.add_argument("--report-only", action="store_true", help="tabulate finished runs; run nothing")
    parser.add_argument("--notebooks", nargs="*", default=[], help="run only these notebooks (default: all)")
    parser.add_argument("--keep", default=str(root / KEPT_RECORDS),
                        help="where each finished seed's records are kept in the repository ('' keeps none)")
    parser.add_argument("--results-doc", default=str(root / RESULTS_DOC),
                        help="the page whose results table to rewrite ('' leaves it alone)")
    args = parser.parse_args(argv)
    artifacts, build = Path(args.artifacts), Path(args.build)
    failed, seconds, records, failed_nbs, checks = [], {}, {}, {}, {}
    for seed in args.seeds:
        art, out = seed_folders(seed, artifacts, build)
        if not args.report_only:
            print(f"=== seed {seed}: artifacts {art}, build {out}", flush=True)
            env = dict(os.environ, COURSE_SEED=str(seed), COURSE_ARTIFACTS=str(art))
            t0 = time.time()
            rc = subprocess.run([sys.executable, "-m", "course_tools.runner", *args.notebooks, "--out", str(out)],
                                env=env).returncode
            seconds[seed] = time.time() - t0
            if rc:
                failed.append(seed)
            if args.keep and (art / "results").is_dir():
                keep_records(seed, art, out, Path(args.keep))
        kept = Path(args.keep) / f"s{seed}" if args.keep else None
        if (art / "results").is_dir():
            records[seed], failed_nbs[seed] = load_results(art / "results"), failed_notebooks(out)
        elif kept is not None and kept.is_dir():
            records[seed] = [r for r in load_results(kept) if "notebook" in r]   # not CHECKS_FILE
            failed_nbs[seed] = failed_notebooks(kept)
        else:
            records[seed], failed_nbs[seed] = [], failed_notebooks(out)
        if (out / "notebooks").is_dir():
            checks[seed] = check_lines(out / "notebooks")
        elif kept is not None and (kept / CHECKS_FILE).is_file():
            checks[seed] = json.loads((kept / CHECKS_FILE).read_text(encoding="utf-8"))
    build.mkdir(parents=True, exist_ok=True)
    table = results_table(records)
    margins = margins_table(checks) if checks else ""
    (build / "SEEDS.md").write_text(seeds_markdown(records, seconds, failed_nbs)
                                    + f"\n## The table of {RESULTS_DOC}\n\n" + table
                                    + (f"\n## The checks' margins\n\n{margins}" if margins else ""), encoding="utf-8")
    print(f"wrote {build / 'SEEDS.md'}" + (f"; a notebook failed at seeds {failed}" if failed else ""))
    if args.results_doc:
        write_results_table(Path(args.results_doc), table)
        if margins:
            write_results_table(Path(args.results_doc), margins, MARGINS_START, MARGINS_END)
        print(f"wrote the results table of {args.results_doc} (git diff shows what moved)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
