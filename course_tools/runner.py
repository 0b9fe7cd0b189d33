"""Execute the whole course headless and write ``build/``.

``python -m course_tools.runner`` (what ``make course`` calls) runs every notebook
of ``notebooks/``, each in a fresh kernel, in the plan of ``make test`` (:mod:`course_tools.testrun`):
01-03 in turn at the profile's threads, then two streams side by side at one torch thread each
(05, 07, 08, 12 in one, the rest in the other: ``testrun.COURSE_STREAM_A``), which on 2 cores finishes
sooner than all in turn.
``--streams 1`` (or env ``COURSE_STREAMS=1``) runs every notebook in turn; so does a run of
notebooks that leaves nothing to put side by side (one notebook, say), and so does a machine with
a GPU unless told otherwise (two hub models would share its memory). It writes:

* ``build/notebooks/NN_name.ipynb`` and ``build/html/NN_name.html`` — executed copies;
* ``build/RESULTS.md`` — every notebook's before/after metrics, wall seconds and peak RAM,
  and the budget report (``reports.budget_report``: seconds against each notebook's budget,
  scaled by this machine's matmul rate, with the longest timed blocks of each notebook over its budget;
  printed too, never a failure).

Each notebook runs in a child process of its own, so the peak resident memory of
its kernel can be read from ``getrusage(RUSAGE_CHILDREN)`` once it ends; the runner
adds that and the wall time to the notebook's results file.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_utils.paths import notebook_files, repo_root
from course_utils.progress import TEXT_PROGRESS_ENV
from course_utils.results import load_results, results_dir
from course_utils.show import markdown_rows
from .reports import budget_report, results_markdown
from .testrun import COURSE_STREAM_A, default_streams, one_thread_env, split


def execute_one(notebook: Path, out_dir: Path, timeout: int) -> None:
    """Run one notebook with nbclient in this process; write the executed copy and HTML."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    from .book import clean_notebook

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.parent)}})
    try:
        client.execute()
    finally:
        (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
        (out_dir / "html").mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out_dir / "notebooks" / notebook.name)
        readable = nbformat.from_dict(clean_notebook(nb))   # progress bars in their final state, no colour codes
        html, _ = HTMLExporter().from_notebook_node(readable)
        (out_dir / "html" / notebook.with_suffix(".html").name).write_text(html, encoding="utf-8")
    kernel_peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"peak_ram_mb": round(kernel_peak_kib / 1024, 1)}))


def _run_one(nb: Path, out_dir: Path, timeout: int, env: dict | None, say) -> dict | None:
    """Run ``nb`` in a child process (``--one``); return its wall seconds and kernel peak RAM, None if it failed.

    The runner's measurements are added to the notebook's results file."""
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "course_tools.runner", "--one", str(nb),
                           "--out", str(out_dir), "--timeout", str(timeout)],
                          capture_output=True, text=True, env=env)
    seconds = time.time() - t0
    if proc.returncode != 0:
        say(f"== {nb.name} FAILED after {seconds:.0f} s\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        return None
    peak = json.loads(proc.stdout.strip().splitlines()[-1])["peak_ram_mb"]
    stats = {"seconds": round(seconds, 1), "peak_ram_mb": peak}
    say(f"== {nb.name} ok in {seconds:.0f} s, kernel peak RAM {peak:.0f} MiB")
    result_file = results_dir() / f"{nb.stem}.json"
    if result_file.exists():  # add the runner's own measurements to the notebook's record
        record = json.loads(result_file.read_text(encoding="utf-8"))
        record["runner"] = stats
        record["peak_ram_mb"] = peak
        result_file.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return stats


def run_course(notebooks: list[Path], out_dir: Path, timeout: int, streams: int = 1) -> int:
    """Run ``notebooks``; ``streams=2``: in :func:`testrun.split`'s plan (stream A :data:`testrun.COURSE_STREAM_A`),
    phase 2 two at a time at one thread each."""
    stats, failed = {}, []
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            print(text, flush=True)

    def run_list(paths: list[Path], env: dict | None) -> None:
        for nb in paths:
            say(f"== {nb.name} started")
            result = _run_one(nb, out_dir, timeout, env, say)
            with lock:
                if result is None:
                    failed.append(nb.name)
                else:
                    stats[nb.stem] = result

    t0 = time.time()
    phase_1, stream_a, stream_b = split(notebooks, COURSE_STREAM_A)
    if streams != 2 or not (stream_a and stream_b):   # nothing to run side by side: all in turn, as given
        phase_1, stream_a, stream_b = notebooks, [], []
    run_list(phase_1, None)
    if stream_a or stream_b:
        say(f"== phase 1 took {time.time() - t0:.0f} s; phase 2, side by side at one torch thread each:\n"
            f"   stream A: {' '.join(p.stem for p in stream_a)}\n   stream B: {' '.join(p.stem for p in stream_b)}")
        one_thread = one_thread_env(dict(os.environ))
        with ThreadPoolExecutor(max_workers=2) as pool:
            for job in [pool.submit(run_list, paths, one_thread) for paths in (stream_a, stream_b)]:
                job.result()
    say(f"== the course took {time.time() - t0:.0f} s")
    stats = dict(sorted(stats.items()))
    ran = {nb.stem for nb in notebooks}
    records = [r for r in load_results() if r["notebook"] in ran]
    report = results_markdown(records, stats)
    report += "\n" + markdown_rows(("notebook", "wall seconds (runner)", "kernel peak RAM (MiB)"),
                                    [(k, f"{v['seconds']:.0f}", f"{v['peak_ram_mb']:.0f}")
                                     for k, v in stats.items()]) + "\n"
    from .bench import matmul_gflops
    budgets = budget_report({k: v["seconds"] for k, v in stats.items()}, matmul_gflops(), records)
    if stream_a:
        budgets = ("Phase 2's notebooks ran two at a time at one thread each: their seconds are wall time while "
                   "sharing the machine, not a notebook's own.\n\n" + budgets)
    report += "\n" + budgets
    print(budgets)
    if failed:
        report += f"\n**Failed:** {', '.join(failed)}\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "RESULTS.md").write_text(report, encoding="utf-8")
    print(f"wrote {out_dir / 'RESULTS.md'}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    root = repo_root() or Path.cwd()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: all, in order)")
    parser.add_argument("--out", default=str(root / "build"))
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    parser.add_argument("--streams", type=int, choices=(1, 2), default=None,
                        help="2: 01-03 first, then two notebooks at a time at one thread each (course_tools.testrun's "
                             "plan); 1: every notebook in turn. Default: env COURSE_STREAMS, else 2 without a GPU "
                             "and 1 with one")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one notebook in this process
    args = parser.parse_args(argv)
    if args.one:
        execute_one(Path(args.one), Path(args.out), args.timeout)
        return 0
    notebooks = [Path(p) for p in args.notebooks] or notebook_files(root)
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {missing}")
    streams = args.streams if args.streams is not None else default_streams("COURSE_STREAMS")
    os.environ.setdefault(TEXT_PROGRESS_ENV, "1")   # the kernels inherit it: bars the executed copies show finished
    return run_course(notebooks, Path(args.out), args.timeout, streams)


if __name__ == "__main__":
    sys.exit(main())
