"""Execute the whole course headless and write ``build/``.

``python -m course_utils.runner`` (what ``make course`` calls) runs every notebook
of ``notebooks/`` in order, each in a fresh kernel, and writes:

* ``build/notebooks/NN_name.ipynb`` and ``build/html/NN_name.html`` — executed copies;
* ``build/RESULTS.md`` — every notebook's before/after metrics, wall seconds and peak RAM,
  and the budget report (``results.budget_report``: seconds against each notebook's budget,
  scaled by this machine's matmul rate; printed too, never a failure).

Each notebook runs in a child process of its own, so the peak resident memory of
its kernel can be read from ``getrusage(RUSAGE_CHILDREN)`` once it ends; the runner
adds that and the wall time to the notebook's results file.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from .paths import notebook_files, repo_root
from .results import budget_report, load_results, results_dir, results_markdown


def execute_one(notebook: Path, out_dir: Path, timeout: int) -> None:
    """Run one notebook with nbclient in this process; write the executed copy and HTML."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.parent)}})
    try:
        client.execute()
    finally:
        (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
        (out_dir / "html").mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out_dir / "notebooks" / notebook.name)
        html, _ = HTMLExporter().from_notebook_node(nb)
        (out_dir / "html" / notebook.with_suffix(".html").name).write_text(html, encoding="utf-8")
    kernel_peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"peak_ram_mb": round(kernel_peak_kib / 1024, 1)}))


def run_course(notebooks: list[Path], out_dir: Path, timeout: int) -> int:
    stats, failed = {}, []
    for nb in notebooks:
        print(f"== {nb.name}", flush=True)
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "course_utils.runner", "--one", str(nb),
                               "--out", str(out_dir), "--timeout", str(timeout)],
                              capture_output=True, text=True)
        seconds = time.time() - t0
        if proc.returncode != 0:
            failed.append(nb.name)
            print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n")
            print(f"   FAILED after {seconds:.0f} s", flush=True)
            continue
        peak = json.loads(proc.stdout.strip().splitlines()[-1])["peak_ram_mb"]
        stats[nb.stem] = {"seconds": round(seconds, 1), "peak_ram_mb": peak}
        print(f"   ok in {seconds:.0f} s, kernel peak RAM {peak:.0f} MiB", flush=True)
        result_file = results_dir() / f"{nb.stem}.json"
        if result_file.exists():  # add the runner's own measurements to the notebook's record
            record = json.loads(result_file.read_text(encoding="utf-8"))
            record["runner"] = stats[nb.stem]
            record["peak_ram_mb"] = peak
            result_file.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    ran = {nb.stem for nb in notebooks}
    records = [r for r in load_results() if r["notebook"] in ran]
    report = results_markdown(records, stats)
    report += "\n| notebook | wall seconds (runner) | kernel peak RAM (MiB) |\n|---|---|---|\n"
    report += "".join(f"| {k} | {v['seconds']:.0f} | {v['peak_ram_mb']:.0f} |\n" for k, v in stats.items())
    from .bench import matmul_gflops
    budgets = budget_report({k: v["seconds"] for k, v in stats.items()}, matmul_gflops())
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
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one notebook in this process
    args = parser.parse_args(argv)
    if args.one:
        execute_one(Path(args.one), Path(args.out), args.timeout)
        return 0
    notebooks = [Path(p) for p in args.notebooks] or notebook_files(root)
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {missing}")
    return run_course(notebooks, Path(args.out), args.timeout)


if __name__ == "__main__":
    sys.exit(main())
