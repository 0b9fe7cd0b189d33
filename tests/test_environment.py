"""The environment is locked and recorded; the evaluation budget comes from the profile."""
import ast
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from course_utils import environment, evaluation, results, training
from course_tools import reports
from course_utils.run_config import get_profile

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-lock.txt"


def test_the_lock_pins_every_package_with_equals():
    pins = [line for line in LOCK.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", pin) for pin in pins), \
        [p for p in pins if "==" not in p]
    names = {pin.split("==")[0].lower().replace("_", "-") for pin in pins}
    # the core, the dev tools, the installer and transitive packages (jinja2 comes through torch and nbconvert)
    assert {"torch", "transformers", "trl", "peft", "datasets", "tokenizers", "numpy", "accelerate", "nbval",
            "pytest", "pip", "jinja2", "safetensors"} <= names
    assert not any(name.startswith("course-utils") for name in names), "the course itself is installed editable"


def test_the_lock_agrees_with_pyproject_pins():
    """A package pinned with == in pyproject.toml has that version in the lock (a stale lock fails here)."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    locked = dict(line.lower().split("==") for line in LOCK.read_text(encoding="utf-8").splitlines()
                  if line and not line.startswith("#"))
    specs = project["dependencies"] + project["optional-dependencies"]["dev"]
    for spec in specs:
        if "==" in spec:
            name, version = spec.lower().split("==")
            assert locked.get(name) == version, (spec, locked.get(name))
        else:
            assert re.match(r"[a-z0-9_.\-]+", spec.lower()).group(0) in locked, f"{spec} is not in the lock"


def test_make_install_installs_the_lock():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "LOCK := requirements-lock.txt" in makefile and "pip install --quiet -r $(LOCK)" in makefile
    assert "$(VENV)/.installed: pyproject.toml $(LOCK)" in makefile


def test_the_environment_record_names_versions_cpu_threads_and_commit():
    rec = environment.environment_record()
    assert rec["packages"]["torch"] == torch.__version__.split("+")[0] or rec["packages"]["torch"] == torch.__version__
    assert set(environment.PACKAGES) <= set(rec["packages"]) and "absent" not in rec["packages"].values()
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rec["torch_threads"] == torch.get_num_threads() and rec["cpu"]
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?|unknown", rec["commit"])
    text = environment.environment_markdown(rec)
    assert rec["cpu_capability"] in text and "transformers " + rec["packages"]["transformers"] in text


def test_the_records_left_out_of_dirty_are_the_ones_make_seeds_writes():
    from course_tools.seeds import KEPT_RECORDS, RESULTS_DOC
    assert set(environment.RECORDS_PATHS) == {KEPT_RECORDS, RESULTS_DOC}


def test_the_commit_is_dirty_for_code_changes_and_not_for_the_records_make_seeds_writes(tmp_path):
    git = lambda *args: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                                       check=True, capture_output=True)
    (tmp_path / "docs" / "seeds" / "s1").mkdir(parents=True)
    files = {"code.py": "x = 1\n", "docs/results.md": "table\n", "docs/seeds/s1/checks.json": "{}\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "start")
    clean = environment.git_commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{12}", clean)
    (tmp_path / "docs/results.md").write_text("another table\n")         # what make seeds writes after a seed
    (tmp_path / "docs/seeds/s1/checks.json").write_text("[]\n")
    environment.git_commit.cache_clear()
    assert environment.git_commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")                          # the code itself changed
    environment.git_commit.cache_clear()
    assert environment.git_commit(tmp_path) == clean + "-dirty"
    environment.git_commit.cache_clear()


def test_every_results_file_carries_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path))
    path = results.record_results("99_test", {"acc": {"before": 0.1, "after": 0.5}}, seed=7, seconds=1.0)
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["environment"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert "Measured in:" in reports.results_markdown([record])


def test_the_profile_sets_torch_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("COURSE_THREADS", "1")
        assert get_profile("cpu-tiny").threads == 1 and torch.get_num_threads() == 1
        monkeypatch.delenv("COURSE_THREADS")
        prof = get_profile("cpu-tiny")
        assert 1 <= prof.threads <= 2 and torch.get_num_threads() == prof.threads
        monkeypatch.setenv("COURSE_THREADS", "zero")
        with pytest.raises(ValueError, match="COURSE_THREADS"):
            get_profile("cpu-tiny")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("fn", [evaluation.evaluate_arithmetic, evaluation.pass_at_k, evaluation.kl_to_reference])
def test_measuring_functions_have_no_default_budget(fn):
    """The test size and the generation budget must be passed (the profile's), never a default of 48."""
    import inspect
    params = inspect.signature(fn).parameters
    for name in ("n", "max_new_tokens"):
        assert params[name].default is inspect.Parameter.empty and params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.signature(training.AccuracyCallback).parameters["max_new_tokens"].default is inspect.Parameter.empty


def test_evaluation_generates_with_the_budget_it_is_given(monkeypatch):
    """The budget reaches the generator: a profile of 37 tokens generates 37, not 48."""
    seen = []

    def fake_generate(model, tokenizer, prompts, max_new_tokens, **kwargs):
        seen.append(max_new_tokens)
        return ["<think>1 + 1 = 2</think><answer>2</answer>"] * len(prompts)

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(evaluation, "chat_prompt", lambda tok, q: q)
    profile = get_profile("cpu-tiny", max_new_tokens=37, eval_size=200)
    evaluation.evaluate_arithmetic(None, None, n=profile.eval_size, max_new_tokens=profile.max_new_tokens)
    assert seen == [37]


MEASURING = {"evaluate_arithmetic", "pass_at_k", "kl_to_reference", "AccuracyCallback"}
# the package's measuring functions that read the test size and the budget from the profile they are given
MEASURING_WITH_PROFILE = {"evaluate", "evaluate_policy", "sampled_failures", "evaluate_stage", "add_stage"}


def notebook_measuring_calls():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            code = "\n".join(line for line in "".join(cell["source"]).splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                name = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
                if name in MEASURING | MEASURING_WITH_PROFILE:
                    yield f"{path.stem} cell {i}", name, node


def test_every_notebook_evaluation_uses_the_profile_budget():
    """Every measuring call in a notebook passes the profile's budget (or the recipe's, where the notebook
    samples with it) and, for held-out test sets, the profile's test size; or it is a package function given the
    profile itself, which takes both from it (``experiment.evaluate`` and the notebooks' measuring functions)."""
    calls = list(notebook_measuring_calls())
    assert len(calls) >= 20
    for where, name, node in calls:
        kw = {k.arg: ast.unparse(k.value) for k in node.keywords}
        if name in MEASURING_WITH_PROFILE:
            assert "profile" in [ast.unparse(a) for a in node.args] + list(kw.values()), (where, name)
            assert not {"n", "max_new_tokens"} & set(kw), (where, kw)   # nothing overrides the profile's
            continue
        assert kw.get("max_new_tokens") in ("profile.max_new_tokens", "recipe.max_new_tokens"), (where, kw)
        if name != "AccuracyCallback" and "n" in kw:  # 10 measures on a named subset (n_problems)
            assert kw["n"] in ("profile.eval_size", "n_problems"), (where, kw)


def _record(nb, seed, after, env_cpu="cpu A"):
    return {"notebook": nb, "seed": seed, "seconds": 10.0, "metrics": {"accuracy": {"before": 0.1, "after": after}},
            "environment": {"cpu": env_cpu, "cpu_capability": "AVX512", "packages": {"torch": "2.13.0"}}}


def test_seeds_table_lists_each_seed_and_the_range():
    from course_tools.seeds import seeds_markdown
    text = seeds_markdown({7: [_record("05_ppo", 7, 0.5)], 1234: [_record("05_ppo", 1234, 0.75),
                                                                   _record("06_dpo", 1234, 0.6)]})
    row = next(line for line in text.splitlines() if line.startswith("| 05_ppo | accuracy"))
    assert row == "| 05_ppo | accuracy | 0.1 → 0.5 | 0.1 → 0.75 | 0.5 – 0.75 |"  # seeds in the order given
    assert "| seed 7 | seed 1234 |" in text
    assert "| 06_dpo | accuracy | – | 0.1 → 0.6 | 0.6 – 0.6 |" in text
    assert "**No record** (failed or not run): 06_dpo at seed 7" in text and "cpu A (AVX512" in text


def test_seeds_report_only_reads_each_seed_folder(tmp_path):
    from course_tools import seeds
    doc = tmp_path / "results.md"
    doc.write_text(f"# Results\n\nabove\n\n{seeds.TABLE_START}\n| old |\n{seeds.TABLE_END}\n\nbelow\n")
    for seed, after in ((3, 0.25), (5, 0.5)):
        art, _ = seeds.seed_folders(seed, tmp_path / "artifacts", tmp_path / "build")
        (art / "results").mkdir(parents=True)
        (art / "results" / "05_ppo.json").write_text(json.dumps(_record("05_ppo", seed, after)), encoding="utf-8")
    assert seeds.main(["--report-only", "3", "5", "--artifacts", str(tmp_path / "artifacts"),
                       "--build", str(tmp_path / "build"), "--results-doc", str(doc), "--keep", ""]) == 0
    (tmp_path / "build" / "seeds" / "s5").mkdir(parents=True)
    (tmp_path / "build" / "seeds" / "s5" / "RESULTS.md").write_text("x\n**Failed:** 05_ppo.ipynb, 07_grpo.ipynb\n")
    assert seeds.main(["--report-only", "3", "5", "--artifacts", str(tmp_path / "artifacts"),
                       "--build", str(tmp_path / "build"), "--results-doc", str(doc), "--keep", ""]) == 0
    text = (tmp_path / "build" / "SEEDS.md").read_text()
    assert "| 05_ppo | accuracy | 0.1 → 0.25 | 0.1 → 0.5 | 0.25 – 0.5 |" in text
    assert "05_ppo.ipynb at seed 5, 07_grpo.ipynb at seed 5" in text
    assert "## The table of docs/results.md" in text and "| 05 | PPO against the rule-based verifier" in text
    page = doc.read_text()                               # the page's table rewritten, the prose around it kept
    assert page.startswith("# Results\n\nabove\n\n") and page.endswith(f"{seeds.TABLE_END}\n\nbelow\n")
    assert "| old |" not in page and "| # | run | seed 3 | seed 5 |" in page
    assert page.count("| 05 | PPO against the rule-based verifier") == 1


def test_a_seeds_kept_records_tabulate_without_its_artifacts(tmp_path):
    """A seed run on another day: its records kept under docs/seeds/s<seed>/ (with its RESULTS.md) stand in for an
    artifacts folder that is gone; a seed with artifacts reads those."""
    from course_tools import seeds
    art, out = seeds.seed_folders(9, tmp_path / "artifacts", tmp_path / "build")
    (art / "results").mkdir(parents=True)
    (art / "results" / "05_ppo.json").write_text(json.dumps(_record("05_ppo", 9, 0.75)), encoding="utf-8")
    out.mkdir(parents=True)
    (out / "RESULTS.md").write_text("x\n**Failed:** 07_grpo.ipynb\n")
    kept = seeds.keep_records(9, art, out, tmp_path / "kept")
    assert sorted(p.name for p in kept.iterdir()) == ["05_ppo.json", "RESULTS.md"]
    import shutil
    shutil.rmtree(tmp_path / "artifacts")
    shutil.rmtree(tmp_path / "build")
    assert seeds.main(["--report-only", "9", "--artifacts", str(tmp_path / "artifacts"), "--build",
                       str(tmp_path / "build"), "--results-doc", "", "--keep", str(tmp_path / "kept")]) == 0
    text = (tmp_path / "build" / "SEEDS.md").read_text()
    assert "| 05_ppo | accuracy | 0.1 → 0.75 |" in text and "07_grpo.ipynb at seed 9" in text


def _check_cell(conditions) -> dict:
    """A check cell as an executed notebook holds it: what ``experiment.Checks`` printed for ``conditions``."""
    import contextlib
    import io

    from course_utils.experiment import Checks
    checks, printed = Checks(always=True), io.StringIO()
    with contextlib.redirect_stdout(printed):
        for method, *args, kwargs in conditions:
            getattr(checks, method)(*args, **kwargs)
    return {"cell_type": "code", "source": ["checks.done()\n"],
            "outputs": [{"output_type": "stream", "name": "stdout", "text": printed.getvalue()}]}


def test_check_lines_read_back_what_checks_printed(tmp_path):
    """The margins table reads the lines ``experiment.Checks`` prints: each comes back with its name, verdict, value
    and threshold, names with ": " and counts in them included; lines of other cells are not checks."""
    from course_tools import seeds
    cell = _check_cell([
        ("at_least", "run (b): gain in greedy accuracy", 0.18, 0.10, {"fmt": "{:+.1%}"}),
        ("at_least", "run (b)'s accuracy above run (a)'s", 0.07, 0.10, {"before": 0.49, "after": 0.56, "fmt": "{:.1%}"}),
        ("at_most", "KL share", 0.077, 0.5, {}),
        ("at_least", "problems fixed (108) minus problems broken (23)", 85, 1, {"fmt": "{}"}),
        ("holds", "cliff: the path along the edge", True, "13 moves, 1 row above the cliff", {}),
        ("holds", "reached its target", True, "steps run: {'a': 5, 'b': 7}", {})])
    other = {"cell_type": "code", "source": ["rl_health(log)\n"],
             "outputs": [{"output_type": "stream", "name": "stdout", "text": "✓ no known failure sign in this run\n"}]}
    (tmp_path / "06_dpo.ipynb").write_text(json.dumps({"cells": [other, cell]}), encoding="utf-8")
    found = seeds.check_lines(tmp_path)["06_dpo"]
    assert [c["name"] for c in found] == ["run (b): gain in greedy accuracy", "run (b)'s accuracy above run (a)'s",
                                          "KL share", "problems fixed minus problems broken",
                                          "cliff: the path along the edge", "reached its target: steps run"]
    assert [c["ok"] for c in found] == [True, False, True, True, True, True]
    assert found[0]["value"] == pytest.approx(0.18) and found[0]["threshold"] == pytest.approx(0.10)
    assert found[1]["shown"] == "7.0% ≥ 10.0%" and found[2]["relation"] == "≤" and "value" not in found[4]


def test_margins_table_names_each_checks_thinnest_seed():
    """Thinnest relative to the threshold's size; a miss counts against "held at"; a check one seed lacks shows
    the seeds that ran it."""
    from course_tools import seeds
    gain = lambda v, ok=True: {"name": "gain", "ok": ok, "value": v, "relation": "≥", "threshold": 0.10,
                               "shown": f"{v:+.1%} ≥ +10.0%", "percent": True}
    kl = lambda v: {"name": "KL share", "ok": True, "value": v, "relation": "≤", "threshold": 0.5,
                    "shown": f"{v:.3g} ≤ 0.5", "percent": False}
    table = seeds.margins_table({3: {"06_dpo": [gain(0.18), kl(0.1)]}, 5: {"06_dpo": [gain(0.07, False)]},
                                 7: {"06_dpo": [gain(0.30), kl(0.4)], "05_ppo": [gain(0.2)]}})
    rows = table.splitlines()
    assert rows[0] == "| # | check | held at | thinnest: value against threshold | margin |"
    assert rows[2] == "| 05 | gain | 1 / 1 | +20.0% ≥ +10.0% (seed 7) | +10.0 pts |"   # notebooks in course order
    assert rows[3] == "| 06 | gain | 2 / 3 | +7.0% ≥ +10.0% (seed 5) | -3.0 pts |"
    assert rows[4] == "| 06 | KL share | 2 / 2 | 0.4 ≤ 0.5 (seed 7) | +0.1 |"
    assert rows[-1] == '**Missed:** 06 "gain" at seed 5.'
    assert seeds.margins_table({3: {"05_ppo": [gain(0.2)]}}).endswith(
        "**Every condition held at every seed** (1 condition, seeds 3).\n")


def test_kept_records_carry_the_check_lines(tmp_path):
    """keep_records keeps the seed's check lines beside its records, and --report-only tabulates them from there
    into the results page's second table."""
    from course_tools import seeds
    art, out = seeds.seed_folders(9, tmp_path / "artifacts", tmp_path / "build")
    (art / "results").mkdir(parents=True)
    (art / "results" / "05_ppo.json").write_text(json.dumps(_record("05_ppo", 9, 0.75)), encoding="utf-8")
    (out / "notebooks").mkdir(parents=True)
    cell = _check_cell([("at_least", "verifier run: gain in greedy accuracy", 0.26, 0.15, {"fmt": "{:+.1%}"})])
    (out / "notebooks" / "05_ppo.ipynb").write_text(json.dumps({"cells": [cell]}), encoding="utf-8")
    kept = seeds.keep_records(9, art, out, tmp_path / "kept")
    assert json.loads((kept / seeds.CHECKS_FILE).read_text())["05_ppo"][0]["shown"] == "+26.0% ≥ +15.0%"
    import shutil
    shutil.rmtree(tmp_path / "artifacts")
    shutil.rmtree(tmp_path / "build")
    doc = tmp_path / "results.md"
    doc.write_text(f"{seeds.TABLE_START}\n{seeds.TABLE_END}\n\nmiddle\n\n{seeds.MARGINS_START}\n| old |\n"
                   f"{seeds.MARGINS_END}\nend\n")
    assert seeds.main(["--report-only", "9", "--artifacts", str(tmp_path / "artifacts"), "--build",
                       str(tmp_path / "build"), "--results-doc", str(doc), "--keep", str(tmp_path / "kept")]) == 0
    page = doc.read_text()
    assert "| 05 | verifier run: gain in greedy accuracy | 1 / 1 | +26.0% ≥ +15.0% (seed 9) | +11.0 pts |" in page
    assert "| old |" not in page and page.endswith(f"{seeds.MARGINS_END}\nend\n") and "\n\nmiddle\n\n" in page
    assert "## The checks' margins" in (tmp_path / "build" / "SEEDS.md").read_text()


def test_the_results_page_holds_the_rows_make_seeds_writes():
    """docs/results.md's table, between the markers, has RESULTS_ROWS's rows in order (a label's ``{step count}``
    read from the runs), one column per seed: what ``make seeds`` would write there."""
    from course_tools.seeds import RESULTS_DOC, RESULTS_ROWS, TABLE_END, TABLE_START
    page = (ROOT / RESULTS_DOC).read_text(encoding="utf-8")
    lines = page.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip("\n").splitlines()
    seeds = re.findall(r"\| seed (\d+)", lines[0])
    assert seeds and lines[0] == "| # | run | " + " | ".join(f"seed {s}" for s in seeds) + " |"
    assert len(lines) == 3 + len(RESULTS_ROWS)        # the last row: the commit each seed ran at
    assert re.fullmatch(r"\| – \| the commit the seed ran at [^|]+\|" + r"( (`[0-9a-f]{7}(-dirty)?`|–) \|)" * len(seeds),
                        lines[-1]), lines[-1]
    for line, (number, label, _) in zip(lines[2:], RESULTS_ROWS):
        pattern = "".join("[^|]+?" if part.startswith("{") else re.escape(part)
                          for part in re.split(r"(\{[^{}]+\})", label))
        assert re.fullmatch(rf"\| {number} \| {pattern} \|" + r"( [^|]+ \|)" * len(seeds), line), line


def test_the_results_table_takes_each_cell_and_step_count_from_the_records():
    from course_tools.seeds import RESULTS_ROWS, results_table
    ppo = lambda seed, after, steps: dict(_record("05_ppo", seed, after), extra={"verifier_steps": steps})
    text = results_table({1234: [ppo(1234, 0.625, 60)], 7: [ppo(7, 0.875, 80)]})
    lines = text.splitlines()
    assert lines[0] == "| # | run | seed 1234 | seed 7 |" and len(lines) == 3 + len(RESULTS_ROWS)
    assert lines[-1].endswith("| – | – |")               # no record names its commit: a dash, never a guess
    row = next(line for line in lines if "rule-based verifier" in line)
    assert row == "| 05 | PPO against the rule-based verifier, 60 steps | 10.0% → 62.5% | 10.0% → 87.5% |"  # first seed's steps
    dpo = next(line for line in lines if line.startswith("| 06 | DPO on self-generated"))
    assert dpo.endswith("? steps | – | – |")              # no record: a dash per seed, never a number made up
    assert {n for n, *_ in RESULTS_ROWS} == {f"{i:02d}" for i in range(2, 13) if i not in (3, 4)}
    env = lambda commit: {"environment": {"commit": commit}}
    assert results_table({3: [dict(ppo(3, 0.5, 60), **env("4d7a9c9bdf05"))],
                          5: [dict(ppo(5, 0.5, 60), **env("6d79f30d9a2c-dirty"))]}).splitlines()[-1].endswith(
        "| `4d7a9c9` | `6d79f30-dirty` |")
