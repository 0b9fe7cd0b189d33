"""``make latest``: the course's unit tests against the newest TRL, transformers, peft, datasets and accelerate.

The course pins its libraries (``requirements-lock.txt``; unsloth caps TRL), so a learner who runs ``pip install -U
trl`` meets whatever changed since. This lane builds a throw-away environment (``.venv-latest/`` by default) with the
newest releases of :data:`LANE` that resolve together, over the Makefile's CPU torch (installed first and pinned, as
``make install`` does; no unsloth, no vLLM), and runs the unit tests in it: the course's own, and among them every
parity check against TRL (the course's losses equal TRL's on the same tensors, the rollout equals TRL's tool loop).
Notebooks are not run by pytest here (``-p no:nbval``); ``--notebooks 02 07`` runs chosen ones headless afterwards
with :mod:`course_tools.runner`, in an artifacts folder of their own.

What it writes, under ``build/`` (``--out``):

* ``latest/<versions>.xml`` and ``latest/<versions>.json``: pytest's junit record of the run and what this module
  read from it: the versions, and each test's outcome (passed, failed, error, skipped) with the first line of its
  cause;
* ``LATEST.md``: every run recorded in ``latest/``, side by side: the counts, the test files, the tests whose outcome
  differs between runs, and each failure's cause. ``docs/compatibility.md`` is written from it.

Pins choose a row of that table: ``--pin trl==1.15.0`` holds one package and lets the rest resolve to their newest;
``--lock`` holds every package not pinned at ``requirements-lock.txt`` (with ``--pin trl==X``: what a learner gets
from ``pip install -U trl`` over the course's environment). Test failures are the report's content, not the lane's:
the exit status is non-zero only where the environment could not be built or pytest recorded nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

LANE = ("trl", "transformers", "peft", "datasets", "accelerate")
"""the libraries this lane moves to their newest release (or a pinned one)"""
SHOWN = LANE + ("torch", "tokenizers", "huggingface-hub")
"""the versions each run records and the report shows"""
LAST_TESTS = ("tests/test_book.py",)
"""left out: it reads notebooks that ``make test`` executed in the same run (course_tools.testrun.LAST_TESTS)"""
NOTEBOOK_TESTS = ("tests/test_matrix.py::test_a_notebook_runs_on_another_family",)
"""left out: unit tests that execute whole notebooks (``make test``'s matrix cells); the lane runs no notebook through
pytest, and ``--notebooks`` runs chosen ones at the course's own scale"""
OUTCOMES = ("passed", "failed", "error", "skipped")


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares names: ``Huggingface_Hub`` -> ``huggingface-hub``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The canonical name at the front of a requirement line (``"trl==1.15.0"`` -> ``"trl"``)."""
    return canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def requirements(pyproject: Path, pins: list[str]) -> list[str]:
    """The course's dependencies and its ``dev`` extra from ``pyproject.toml``, for the lane's environment.

    torch is left out (installed before, pinned); each package of :data:`LANE` loses its range (the newest release
    that resolves), unless ``pins`` gives it one; a pin of any other package replaces that package's range.
    """
    import tomllib
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    pinned = {requirement_name(p): p for p in pins}
    out = []
    for req in project["dependencies"] + project["optional-dependencies"]["dev"]:
        name = requirement_name(req)
        if name == "torch":
            continue
        out.append(pinned.pop(name) if name in pinned else name if name in LANE else req)
    return out + list(pinned.values())


def lock_constraints(lock: Path, pins: list[str]) -> str:
    """``requirements-lock.txt`` as a pip constraints file, less the packages ``pins`` names and torch."""
    free = {requirement_name(p) for p in pins} | {"torch"}
    lines = [line for line in lock.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("#") and requirement_name(line) not in free]
    return "\n".join(lines) + "\n"


def build(venv: Path, root: Path, python: str, torch_spec: str, reqs: list[str], constraints: str | None) -> None:
    """A fresh virtual environment at ``venv``: pip, then ``torch_spec`` alone (an unpinned torch would pull a
    CUDA build), then ``reqs`` (under ``constraints`` where given), the course itself without its pins, and the
    Jupyter kernel the notebook runner starts."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    subprocess.run(pip + [torch_spec], check=True)
    extra = []
    if constraints is not None:
        (venv / "constraints.txt").write_text(constraints, encoding="utf-8")
        extra = ["-c", str(venv / "constraints.txt")]
    subprocess.run(pip + extra + reqs, check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(root)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3",
                    "--display-name", "Python 3 (course, latest)"], check=True, stdout=subprocess.DEVNULL)


def installed_versions(venv: Path) -> dict[str, str]:
    """The versions of :data:`SHOWN` (and Python) in ``venv``; a package that is not there is left out."""
    code = ("import json, platform; from importlib import metadata as m\n"
            "out = {'python': platform.python_version()}\n"
            f"for n in {list(SHOWN)!r}:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(out))")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(run.stdout)


def label(versions: dict[str, str]) -> str:
    """A run's name from its versions of :data:`LANE`: ``trl-1.16.0_transformers-5.25.0_...``."""
    return "_".join(f"{name}-{versions.get(name, 'none')}" for name in LANE)


def run_tests(venv: Path, root: Path, junit: Path, tests: list[str]) -> int:
    """pytest in ``venv`` over ``tests`` without nbval, recording to ``junit``; pytest's exit status."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    ignore = [f"--ignore={path}" for path in LAST_TESTS] + [f"--deselect={test}" for test in NOTEBOOK_TESTS]
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:nbval", "-o", "addopts=", "-o",
           "junit_family=xunit1", "-q", "-rfEs", f"--junitxml={junit}", *ignore, *tests]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=root).returncode


def make_command(pins: list[str], lock: bool) -> str:
    """The ``make latest`` line that asks for ``pins`` (TRL's as ``TRL=``, the others as ``PINS=``) and ``lock``."""
    trl = [p.split("==", 1)[1] for p in pins if requirement_name(p) == "trl" and "==" in p]
    others = [p for p in pins if requirement_name(p) != "trl" or "==" not in p]
    return ("make latest" + "".join(f" TRL={v}" for v in trl) + (f' PINS="{" ".join(others)}"' if others else "")
            + (" REST=lock" if lock else ""))


def first_line(text: str | None) -> str:
    """The first non-blank line of ``text``, shortened to 200 characters ('' for none)."""
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= 200 else line[:197] + "..."
    return ""


def parse_junit(path: Path) -> list[dict]:
    """Each test case of a pytest junit file as ``{"test": "tests/x.py::name", "outcome": ..., "cause": ...}``.

    The outcome is the first of ``failure`` (failed), ``error`` (an error in a fixture or at collection) and
    ``skipped`` the case holds, else passed; the cause is the first line of that element's message, or of its text
    where the message is empty (its first ``E`` line, the exception, for a traceback).
    """
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, cause = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome, cause = name, first_line(found.get("message")) or _assertion_line(found.text)
                break
        where = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        cases.append({"test": f"{where}::{case.get('name')}", "outcome": outcome, "cause": cause})
    return cases


def _assertion_line(text: str | None) -> str:
    """The first line pytest marks ``E`` in a traceback (the exception), else the text's first line."""
    marked = [line[1:] for line in (text or "").splitlines() if line.startswith("E ")]
    return first_line("\n".join(marked)) or first_line(text)


def is_trl_check(test: str) -> bool:
    """A parity check against TRL or a call of a TRL trainer: by the course's naming, a test whose name says TRL."""
    return "trl" in test.split("::", 1)[-1].lower()


def counts(cases: list[dict]) -> dict[str, int]:
    return {outcome: sum(c["outcome"] == outcome for c in cases) for outcome in OUTCOMES}


def load_runs(folder: Path) -> list[dict]:
    """Every run recorded in ``folder`` (``*.json``), oldest TRL first, then by the other versions."""
    def key(run):
        return [tuple(int(x) if x.isdigit() else 0 for x in run["versions"].get(n, "0").split(".")) for n in LANE]
    return sorted((json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")), key=key)


def _column(run: dict) -> str:
    """A run's column heading: its versions of :data:`LANE`, and how the others were chosen."""
    v = run["versions"]
    held = {"lock": ", the rest at the lock", "newest": ", the rest newest"}[run["rest"]]
    cut = ", interrupted: part of the tests" if run.get("pytest_exit") == 2 else ""   # pytest's exit 2: stopped
    return f"TRL {v.get('trl')} (transformers {v.get('transformers')}{held}{cut})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def report_markdown(runs: list[dict]) -> str:
    """``build/LATEST.md``: the runs side by side (see the module's docstring)."""
    out = ["# The course against newer libraries (`make latest`)\n\n",
           "Written by `python -m course_tools.latest` from every run in `build/latest/`. Regenerate a row with "
           "`make latest` (the newest releases), `make latest TRL=<version>` (TRL pinned, the rest newest) or "
           "`make latest REST=lock [TRL=<version>]` (the rest at requirements-lock.txt).\n",
           "\n## Runs\n\n"]
    out.append(_table(["run", *SHOWN, "python", "passed", "failed", "error", "skipped", "TRL checks passed",
                       "command"],
                      [[str(i + 1), *(r["versions"].get(n, "-") for n in SHOWN), r["versions"].get("python", "-"),
                        *(str(r["counts"][o]) for o in OUTCOMES),
                        "{}/{}".format(sum(c["outcome"] == "passed" for c in r["tests"] if is_trl_check(c["test"])),
                                       sum(is_trl_check(c["test"]) for c in r["tests"])),
                        f"`{make_command(r['pins'], r['rest'] == 'lock')}`"] for i, r in enumerate(runs)]))
    out.append("\nRuns: " + "; ".join(f"{i + 1} = {_column(r)}" for i, r in enumerate(runs)) + ".\n")
    outcome = [{c["test"]: c for c in r["tests"]} for r in runs]
    files = sorted({c["test"].split("::")[0] for r in runs for c in r["tests"]})
    out.append("\n## Passed per test file\n\n")
    rows = []
    for f in files:
        cells = []
        for by_test in outcome:
            mine = [c for t, c in by_test.items() if t.split("::")[0] == f]
            ran = [c for c in mine if c["outcome"] != "skipped"]
            cells.append(f"{sum(c['outcome'] == 'passed' for c in ran)}/{len(ran)}" if mine else "-")
        rows.append([f"`{f}`", *cells])
    out.append(_table(["file (passed/ran)", *(str(i + 1) for i in range(len(runs)))], rows))
    differ = sorted(t for t in set().union(*outcome) if len({o.get(t, {}).get("outcome", "-") for o in outcome}) > 1)
    out.append("\n## Tests whose outcome differs between runs\n\n")
    out.append(_table(["test", *(str(i + 1) for i in range(len(runs)))],
                      [[f"`{t}`", *(o.get(t, {}).get("outcome", "-") for o in outcome)] for t in differ])
               if differ else "None.\n")
    out.append("\n## Failures and errors, with the first line of each cause\n")
    for i, r in enumerate(runs):
        bad = [c for c in r["tests"] if c["outcome"] in ("failed", "error")]
        out.append(f"\n**Run {i + 1}**, {_column(r)}: {len(bad) or 'none'}\n\n")
        out.extend(f"- `{c['test']}` ({c['outcome']}): {c['cause']}\n" for c in bad)
    for r in (r for r in runs if r.get("notebooks")):
        out.append(f"\n## Notebooks run headless in run {runs.index(r) + 1}\n")
        for nb in r["notebooks"]:
            out.append(f"\n**{nb['notebook']}** ({nb['seconds']} s): {nb['status']}\n\n")
            out.extend(f"- {name}: before {pair['before']:.4g}, after {pair['after']:.4g}\n"
                       for name, pair in nb.get("metrics", {}).items())
    return "".join(out)


def write_run(run: dict, out: Path, name: str) -> None:
    """Record ``run`` as ``out/latest/<name>.json`` and rewrite ``out/LATEST.md`` over every recorded run."""
    (out / "latest" / f"{name}.json").write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    (out / "LATEST.md").write_text(report_markdown(load_runs(out / "latest")), encoding="utf-8")


def run_notebooks(venv: Path, root: Path, numbers: list[str], out: Path) -> list[dict]:
    """Run the notebooks ``numbers`` (``["02", "07"]``) headless in ``venv``, one after another, with an artifacts
    folder of their own under ``out`` (a stage a notebook loads and does not find is rebuilt there); each one's
    status (whether it ran to its end, its check cell included) and its recorded before/after metrics."""
    paths = [p for n in numbers for p in sorted((root / "notebooks").glob(f"{n}_*.ipynb"))]
    env = dict(os.environ, COURSE_ARTIFACTS=str(out / "artifacts"))
    found = []
    for nb in paths:
        t0 = time.time()
        rc = subprocess.run([str(venv / "bin" / "python"), "-m", "course_tools.runner", str(nb), "--streams", "1",
                             "--out", str(out)], cwd=root, env=env).returncode
        record = out / "artifacts" / "results" / f"{nb.stem}.json"
        metrics = json.loads(record.read_text(encoding="utf-8"))["metrics"] if record.is_file() else {}
        found.append({"notebook": nb.stem, "seconds": round(time.time() - t0),
                      "status": "ran to its end, check cell included" if rc == 0 else f"failed (runner exit {rc})",
                      "metrics": metrics})
    return found


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=str(root / ".venv-latest"), help="the throw-away environment")
    parser.add_argument("--python", default=sys.executable, help="the Python that makes the environment")
    parser.add_argument("--torch", default="torch==2.13.0", help="torch's requirement, installed first")
    parser.add_argument("--pin", action="append", default=[], help="a requirement to hold, e.g. trl==1.15.0")
    parser.add_argument("--lock", action="store_true", help="hold every package not pinned at requirements-lock.txt")
    parser.add_argument("--no-build", action="store_true", help="reuse the environment at --venv as it is")
    parser.add_argument("--notebooks", nargs="*", default=[], help="notebooks to run afterwards, e.g. 02 07")
    parser.add_argument("--out", default=str(root / "build"))
    parser.add_argument("--report", action="store_true",
                        help="only rewrite LATEST.md from the runs in latest/ (runs copied from other clones)")
    parser.add_argument("tests", nargs="*", default=["tests"], help="what pytest runs (default: tests/)")
    args = parser.parse_args(argv)
    venv, out = Path(args.venv).resolve(), Path(args.out).resolve()
    if args.report:
        (out / "LATEST.md").write_text(report_markdown(load_runs(out / "latest")), encoding="utf-8")
        return 0
    t0 = time.time()
    if not args.no_build:
        constraints = lock_constraints(root / "requirements-lock.txt", args.pin) if args.lock else None
        build(venv, root, args.python, args.torch, requirements(root / "pyproject.toml", args.pin), constraints)
    built = time.time()
    versions = installed_versions(venv)
    name = label(versions)
    junit = out / "latest" / f"{name}.xml"
    junit.unlink(missing_ok=True)
    rc = run_tests(venv, root, junit, args.tests)
    if not junit.is_file():
        print(f"pytest (exit {rc}) recorded nothing in {junit}", file=sys.stderr)
        return 1
    cases = parse_junit(junit)
    run = {"versions": versions, "rest": "lock" if args.lock else "newest", "pins": args.pin,
           "seconds": {"build": round(built - t0), "tests": round(time.time() - built)},
           "pytest_exit": rc, "counts": counts(cases), "tests": cases}
    write_run(run, out, name)
    if args.notebooks:                 # the tests' report stands first; the notebooks' figures are added to it
        run["notebooks"] = run_notebooks(venv, root, args.notebooks, out / "latest" / f"{name}-notebooks")
        write_run(run, out, name)
    print(f"{name}: " + ", ".join(f"{n} {o}" for o, n in run["counts"].items())
          + f"; build {run['seconds']['build']} s, tests {run['seconds']['tests']} s; wrote {out / 'LATEST.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
