"""Run the course once per seed and tabulate every recorded metric across the seeds.

``make seeds SEEDS="1234 7 3"`` (``python -m course_utils.seeds 1234 7 3``) runs the whole
course (``course_utils.runner``) once per seed, each in its own artifacts folder
(``artifacts/seeds/s<seed>/``: stages of one seed never meet another's) and build folder
(``build/seeds/s<seed>/``), then writes ``build/SEEDS.md``: for every notebook and metric, the
before and after values at each seed, with their min–max, and the environment they were
measured in. The README's results table and the notebooks' measured ranges come from it.

``python -m course_utils.seeds --report-only 1234 7`` re-tabulates finished runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .environment import environment_markdown
from .paths import repo_root
from .results import load_results


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
    head = "| notebook | metric | " + " | ".join(f"seed {s}" for s in seeds) + " | after: min – max |"
    lines = ["# The course at several seeds", "",
             "Every before → after metric the notebooks recorded, per seed (held-out data), and the range of the "
             "'after' values across the seeds that recorded it. Made by `make seeds`.", "",
             head, "|" + "---|" * (len(seeds) + 3)]
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
            lines.append(f"| {nb if i == 0 else ''} | {name} | " + " | ".join(cells) + f" | {span} |")
    missing = [f"{nb} at seed {s}" for s in seeds for nb in notebooks if nb not in by_seed[s]]
    if missing:
        lines += ["", "**No record** (failed or not run): " + ", ".join(missing)]
    failures = [f"{nb} at seed {s}" for s in seeds for nb in (failed or {}).get(s, [])]
    if failures:
        lines += ["", "**Failed** (a cell raised, most often a check; its figures above were recorded before it): "
                  + ", ".join(failures)]
    lines += ["", "| seed | notebooks recorded | seconds (sum of the notebooks' own) |", "|---|---|---|"]
    for s in seeds:
        own = sum(r.get("runner", {}).get("seconds", r.get("seconds", 0.0)) for r in records[s])
        wall = f"; {seconds[s]:.0f} s wall" if seconds and s in seconds else ""
        lines.append(f"| {s} | {len(records[s])} | {own:.0f}{wall} |")
    envs = sorted({json.dumps(r["environment"], sort_keys=True) for s in seeds for r in records[s]
                   if r.get("environment")})
    lines += ["", "Measured in:", ""] + [environment_markdown(json.loads(e)) for e in envs]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    root = repo_root() or Path.cwd()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", nargs="+", type=int)
    parser.add_argument("--artifacts", default=str(root / "artifacts"))
    parser.add_argument("--build", default=str(root / "build"))
    parser.add_argument("--report-only", action="store_true", help="tabulate finished runs; run nothing")
    parser.add_argument("--notebooks", nargs="*", default=[], help="run only these notebooks (default: all)")
    args = parser.parse_args(argv)
    artifacts, build = Path(args.artifacts), Path(args.build)
    failed, seconds, records, failed_nbs = [], {}, {}, {}
    for seed in args.seeds:
        art, out = seed_folders(seed, artifacts, build)
        if not args.report_only:
            print(f"=== seed {seed}: artifacts {art}, build {out}", flush=True)
            env = dict(os.environ, COURSE_SEED=str(seed), COURSE_ARTIFACTS=str(art))
            t0 = time.time()
            rc = subprocess.run([sys.executable, "-m", "course_utils.runner", *args.notebooks, "--out", str(out)],
                                env=env).returncode
            seconds[seed] = time.time() - t0
            if rc:
                failed.append(seed)
        records[seed] = load_results(art / "results") if (art / "results").is_dir() else []
        failed_nbs[seed] = failed_notebooks(out)
    build.mkdir(parents=True, exist_ok=True)
    (build / "SEEDS.md").write_text(seeds_markdown(records, seconds, failed_nbs), encoding="utf-8")
    print(f"wrote {build / 'SEEDS.md'}" + (f"; a notebook failed at seeds {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
