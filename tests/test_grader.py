"""The grader grades: the reference scores 100%, the stubs 0%, and typical mistakes each fail a named check."""
import inspect
import os
import subprocess
import sys
import textwrap

import pytest

from course_tools import assignments, grader

# function -> [(mistake, the check it must fail, [(reference text, mutated text), ...])]
MUTANTS = {
    "sft_loss": [
        ("labels not shifted (predicts the current token)", "plain next-token loss (no masked labels)",
         [("shift_labels = labels[:, 1:]", "shift_labels = labels[:, :-1]")]),
        ("mean over every position, masked ones too", "masked labels are left out of the mean",
         [("return -masked_mean(logps, mask)", "return -(logps * mask).sum() / mask.numel()")]),
        ("sign error", "training smoke: fits one batch", [("return -masked_mean(", "return masked_mean(")]),
        ("ignore_index hard-coded", "the ignore_index argument is used",
         [("mask = shift_labels != ignore_index", "mask = shift_labels != -100")]),
    ],
    "bradley_terry_loss": [
        ("margin the wrong way round", "which answer is preferred",
         [("logsigmoid(chosen_rewards - rejected_rewards)", "logsigmoid(rejected_rewards - chosen_rewards)")]),
        ("log(sigmoid(x)) instead of logsigmoid", "large margins stay finite",
         [("-F.logsigmoid(chosen_rewards - rejected_rewards)",
           "-torch.log(torch.sigmoid(chosen_rewards - rejected_rewards))")]),
        ("sum instead of mean", "values", [(").mean()", ").sum()")]),
    ],
    "kl_estimate": [
        ("k1 in the wrong direction", "k1 and k3 estimate KL(pi || pi_ref)", [("return -log_r", "return log_r")]),
        ("k3 of the inverse ratio", "k3", [("torch.exp(log_r) - log_r - 1", "torch.exp(-log_r) + log_r - 1")]),
        ("k2 without the half", "k2", [("0.5 * log_r ** 2", "log_r ** 2")]),
        ("an unknown kind returns None", "an unknown kind raises ValueError",
         [('raise ValueError(f"kind must be one of {KL_KINDS}, got {kind!r}")', "return None")]),
    ],
    "gae": [
        ("bootstraps from V_t instead of V_{t+1} (off by one)", "lambda = 0: one-step TD error",
         [("gamma * next_value - values[:, t]", "gamma * values[:, t] - values[:, t]")]),
        ("lambda left out of the recursion", "general gamma and lambda",
         [("gamma * lam * next_advantage", "gamma * next_advantage")]),
        ("the mask ignored", "nothing after EOS counts (mask)", [("if mask is not None:", "if False:")]),
        ("values not detached", "no gradient flows into the values",
         [("rewards, values = rewards.detach(), values.detach()", "rewards, values = rewards, values")]),
    ],
    "ppo_policy_loss": [
        ("min instead of max (the optimistic bound)", "the clip, both signs of A",
         [("torch.max(unclipped, clipped)", "torch.min(unclipped, clipped)")]),
        ("the ratio inverted", "the ratio's direction",
         [("torch.exp(logps - old_logps)", "torch.exp(old_logps - logps)")]),
        ("no mask", "ratio 1: the loss is -mean A",
         [("loss = masked_mean(torch.max(unclipped, clipped), mask)", "loss = torch.max(unclipped, clipped).mean()")]),
        ("clip fraction counted the wrong way", "clip fraction", [("(clipped > unclipped)", "(clipped < unclipped)")]),
    ],
    "ppo_value_loss": [
        ("the half left out", "values", [("loss = 0.5 * masked_mean(", "loss = masked_mean(")]),
        ("min instead of max", "the clip is around the old value",
         [("torch.max(unclipped_error, clipped_error)", "torch.min(unclipped_error, clipped_error)")]),
        ("clipped around the return", "the clip is around the old value",
         [("old_values - clip_range_value, old_values + clip_range_value",
           "returns - clip_range_value, returns + clip_range_value")]),
    ],
    "dpo_loss": [
        ("beta left out", "implicit rewards", [("chosen_rewards = beta * (", "chosen_rewards = ("),
                                               ("rejected_rewards = beta * (", "rejected_rewards = (")]),
        ("log-ratio the wrong way round", "training smoke: learns a preference",
         [("(policy_chosen_logps - ref_chosen_logps)", "(ref_chosen_logps - policy_chosen_logps)"),
          ("(policy_rejected_logps - ref_rejected_logps)", "(ref_rejected_logps - policy_rejected_logps)")]),
        ("rewards not detached", "implicit rewards are detached",
         [("chosen_rewards.detach(), rejected_rewards.detach()", "chosen_rewards, rejected_rewards")]),
        ("the batch mean returned instead of one loss per pair", "loss per pair",
         [("return losses, ", "return losses.mean(), ")]),
        ("log(sigmoid(x))", "large margins stay finite",
         [("-F.logsigmoid(chosen_rewards - rejected_rewards)",
           "-torch.log(torch.sigmoid(chosen_rewards - rejected_rewards))")]),
    ],
    "grpo_advantages": [
        ("std without epsilon", "a group of equal rewards gets 0", [("advantages / (std + 1e-4)", "advantages / std")]),
        ("biased std", "unbiased std", [("grouped.std(1)", "grouped.std(1, unbiased=False)")]),
        ("the batch mean instead of each group's", "group scale",
         [("rewards - grouped.mean(1).repeat_interleave(num_generations)", "rewards - rewards.mean()")]),
        ("no check of the group size", "a batch of partial groups raises",
         [("if rewards.dim() != 1 or rewards.numel() % num_generations:", "if False:")]),
    ],
    "grpo_loss": [
        ("pi_old not detached on-policy (no gradient)", "on-policy (old_logps None): value and gradient",
         [("old_logps = logps.detach() if old_logps is None", "old_logps = logps if old_logps is None")]),
        ("grpo averaged over all tokens (the wrong normaliser)", "loss types",
         [("return (per_token.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()",
           "return per_token.sum() / mask.sum().clamp(min=1.0)")]),
        ("k1 instead of k3 in the KL term", "the KL term",
         [('kl = kl_estimate(logps, ref_logps, "k3")', 'kl = kl_estimate(logps, ref_logps, "k1")')]),
        ("epsilon_high ignored", "the clip, with epsilon_high", [("1 + epsilon_high", "1 + epsilon_low")]),
        ("dr_grpo divided by the token count", "loss types",
         [("per_token.sum() / (per_token.size(0) * max_completion_length)", "per_token.sum() / mask.sum()")]),
        ("the sampler's weight ignored", "the sampler's weight (is_weight)",
         [("if is_weight is not None:", "if False:")]),
        ("the sampler's weight folded into the ratio before the clip", "the sampler's weight (is_weight)",
         [("ratio = torch.exp(log_ratio)", "ratio = torch.exp(log_ratio) * (1.0 if is_weight is None else is_weight)"),
          ("if is_weight is not None:", "if False:")]),
        ("the sampler's weight multiplied into the KL term too", "the sampler's weight and the KL term",
         [("per_token = per_token + beta * (kl * ratio if use_bias_correction_kl else kl)",
           "per_token = per_token + beta * (kl * ratio if use_bias_correction_kl else kl)"
           " * (1.0 if is_weight is None else is_weight)")]),
        ("tokens the weight drops left out of the normaliser", "the sampler's weight under every loss type",
         [("per_token = per_token * is_weight", "per_token, mask = per_token * is_weight, mask * (is_weight != 0)")]),
        ("the sampler's weight ignored at sequence level", "the sampler's weight at sequence level (GSPO)",
         [("if is_weight is not None:", 'if is_weight is not None and importance_sampling_level == "token":')]),
    ],
    "soft_distillation_loss": [
        ("no T^2", "the temperature and its T^2", [("return temperature ** 2 * masked_mean(", "return masked_mean(")]),
        ("the KL reversed", "T = 1", [("kl = (log_p.exp() * (log_p - log_q)).sum(-1)",
                                      "kl = (log_q.exp() * (log_q - log_p)).sum(-1)")]),
        ("the teacher not detached", "the teacher gets no gradient",
         [("teacher_logits.detach() / temperature", "teacher_logits / temperature")]),
        ("the temperature on the student only", "the temperature and its T^2",
         [("F.log_softmax(teacher_logits.detach() / temperature", "F.log_softmax(teacher_logits.detach()")]),
        ("the mask ignored", "masked positions", [("if mask is None:", "if True:")]),
    ],
}

# accuracy_reward is one line over the package's helpers: its mistakes are in functions a student might write,
# made from one correct-looking template with one slot changed each
ACCURACY_TEMPLATE = """
def accuracy_reward(completions, answer=None, tags=COURSE_TAGS, **kwargs):
    {column}
    if len(answer) != len(completions):
        raise ValueError("accuracy_reward: one answer per completion")
    out = []
    for c, a in zip(completions, answer):
        t, tg = {text}, {tags}
        i = t.{find}(tg.answer_open)
        j = t.find(tg.answer_close, i)
        got = t[i + len(tg.answer_open):j].strip() if i >= 0 and j >= 0 else None
        out.append(1.0 if got and len(got) <= MAX_ANSWER_CHARS and {compare} else 0.0)
    return out
"""
ACCURACY_SLOTS = {"column": 'if answer is None: raise ValueError("accuracy_reward needs the column `answer`")',
                  "text": "completion_text(c)", "find": "find", "compare": "answers_equal(got, a)", "tags": "tags"}
ACCURACY_MUTANTS = [
    ("the last answer block", "the first answer block counts", {"find": "rfind"}),
    ("strings compared, not values", "equal numbers written differently", {"compare": "got == str(a).strip()"}),
    ("a missing column scores 0 silently", "a missing answer column raises ValueError",
     {"column": "answer = answer if answer is not None else [None] * len(completions)",
      "compare": "a is not None and answers_equal(got, a)"}),
    ("the course's tags written in", "the tags argument is used", {"tags": "COURSE_TAGS"}),
    ("raises on a completion that is not text", "never raises on model output",
     {"text": 'c if isinstance(c, str) else c[-1]["content"]'}),
]


def test_the_accuracy_template_itself_passes():
    namespace = _student_namespace()
    exec(ACCURACY_TEMPLATE.format(**ACCURACY_SLOTS), namespace)
    assert grader.score(grader.grade_function("accuracy_reward", namespace["accuracy_reward"])) == 1.0


def _student_namespace(name: str | None = None) -> dict:
    """What a student.py holding ``name`` has in scope: the header, and its assignment's imports (A3's kl_estimate)."""
    imports = "".join(a.imports for a in assignments.ASSIGNMENTS.values() if any(g.name == name for g in a.functions))
    namespace: dict = {}
    exec(assignments.STUDENT_HEADER.format(title="t", key="A0") + imports, namespace)
    return namespace


def _mutant(name: str, edits) -> object:
    source = textwrap.dedent(inspect.getsource(grader.REFERENCE[name]))
    for old, new in edits:
        assert old in source, f"{name}: the mutation's text {old!r} is no longer in the reference"
        source = source.replace(old, new)
    namespace = _student_namespace(name)
    exec(source, namespace)
    return namespace[name]


CASES = [(name, mistake, check, edits) for name, ms in MUTANTS.items() for mistake, check, edits in ms]


@pytest.mark.parametrize("name,mistake,check,edits", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_a_typical_mistake_fails_a_named_check(name, mistake, check, edits):
    failed = {r.check: r.message for r in grader.grade_function(name, _mutant(name, edits)) if not r.passed}
    assert check in failed, f"{mistake}: failed only {sorted(failed)}"
    assert "—" in failed[check]                                   # the message carries the check's hint
    assert "NameError" not in failed[check], failed[check]        # caught by what it computes, not a missing import


@pytest.mark.parametrize("mistake,check,slots", ACCURACY_MUTANTS, ids=[m[0] for m in ACCURACY_MUTANTS])
def test_a_typical_reward_mistake_fails_a_named_check(mistake, check, slots):
    namespace = _student_namespace()
    exec(ACCURACY_TEMPLATE.format(**{**ACCURACY_SLOTS, **slots}), namespace)
    failed = {r.check for r in grader.grade_function("accuracy_reward", namespace["accuracy_reward"]) if not r.passed}
    assert check in failed, f"{mistake}: failed only {sorted(failed)}"


def test_every_graded_function_has_three_mistakes_caught():
    counts = {name: len(ms) for name, ms in MUTANTS.items()} | {"accuracy_reward": len(ACCURACY_MUTANTS)}
    graded = {g.name for a in assignments.ASSIGNMENTS.values() for g in a.functions}
    assert set(counts) == graded == set(grader.CHECKS) and min(counts.values()) >= 3


def test_the_reference_scores_100_and_the_stubs_0(tmp_path):
    for key, a in assignments.ASSIGNMENTS.items():
        solved = assignments.write(tmp_path / "key", solutions=True)
        assert grader.score(grader.grade(key, tmp_path / "key" / a.folder / "student.py")) == 1.0, key
        assignments.write(tmp_path / "stubs")
        results = grader.grade(key, tmp_path / "stubs" / a.folder / "student.py")
        assert grader.score(results) == 0.0, key
        for r in results:   # a clear message per function: which section teaches it
            assert "is not written yet" in r.message and "notebook" in r.message, r
    assert len(solved) == len(assignments.ASSIGNMENTS)


def test_write_keeps_a_students_work(tmp_path):
    first = assignments.write(tmp_path)[0]
    first.write_text(first.read_text() + "\n# my work\n")
    assignments.write(tmp_path)
    assert first.read_text().endswith("# my work\n")


def test_grader_cli_exit_status(tmp_path):
    assignments.write(tmp_path, solutions=True)
    assert grader.main(["A4", "--file", str(tmp_path / "a4_distillation" / "student.py")]) == 0
    assignments.write(tmp_path / "s")
    assert grader.main(["A4", "--file", str(tmp_path / "s" / "a4_distillation" / "student.py")]) == 1


def test_student_mode_puts_the_students_functions_where_the_course_calls_them(tmp_path):
    assignments.write(tmp_path, solutions=True)
    stub = tmp_path / "a4_distillation" / "student.py"           # A4 left as a stub: the reference stays
    stub.unlink()
    assignments.write(tmp_path)
    code = ("import course_utils\nfrom course_utils import losses, ppo, grpo, dpo, rewards, distill\n"
            "assert losses.gae is ppo.gae and losses.gae.__module__.startswith('course_student')\n"
            "assert grpo.grpo_loss is losses.grpo_loss and grpo.grpo_loss.__module__.startswith('course_student')\n"
            "assert dpo.dpo_loss.__module__.startswith('course_student')\n"
            "assert rewards.accuracy_reward.__module__.startswith('course_student')\n"
            "assert losses.soft_distillation_loss.__module__ == 'course_utils.losses'\n"
            "print(course_utils.STUDENT_FUNCTIONS)\n")
    env = {**os.environ, "COURSE_IMPL": "student", "COURSE_ASSIGNMENTS": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'soft_distillation_loss': 'reference (stub)'" in out.stdout and "'gae': 'student'" in out.stdout


def test_an_unknown_impl_is_refused():
    env = {**os.environ, "COURSE_IMPL": "mine"}
    out = subprocess.run([sys.executable, "-c", "import course_utils"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "COURSE_IMPL must be" in out.stderr


PPO_SCRIPT = """
import json, torch
from dataclasses import replace
import course_utils
from course_utils import data, modeling, ppo, recipes
from course_utils.run_config import get_profile
tokenizer = modeling.train_tokenizer()
from transformers import AutoModelForSequenceClassification
policy, ref = (modeling.build_model(tokenizer, seed=0) for _ in range(2))
torch.manual_seed(1)
config = type(policy.config)(**{**policy.config.to_dict(), "num_labels": 1})
value = AutoModelForSequenceClassification.from_config(config)
recipe = replace(recipes.recipe_for("ppo", get_profile("cpu-tiny")), steps=2, rollouts_per_step=8, minibatch_size=4,
                 max_new_tokens=8)
history = ppo.train(policy, value, ref, tokenizer, data.load_jsonl("arithmetic", "train")[:16], ppo.verifier_scores,
                    recipe, progress=False)
print(json.dumps([{k: v for k, v in h.items() if "time" not in k and "second" not in k} for h in history]))
print(sum(p.double().sum().item() for p in policy.parameters()))
print(ppo.gae.__module__.startswith("course_student"), ppo.ppo_policy_loss.__module__.startswith("course_student"))
"""


def test_student_mode_with_the_reference_functions_trains_ppo_to_the_same_numbers(tmp_path):
    assignments.write(tmp_path, solutions=True)
    runs = []
    for impl in ("reference", "student"):
        env = {**os.environ, "COURSE_IMPL": impl, "COURSE_ASSIGNMENTS": str(tmp_path), "COURSE_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", PPO_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(out.stdout.strip().splitlines()[-3:])
    assert runs[0][-1] == "False False" and runs[1][-1] == "True True"      # the student's functions trained
    assert runs[0][:2] == runs[1][:2]                                       # every step's stats, the final weights


def test_grading_in_student_mode_still_compares_with_the_packages_functions(tmp_path):
    """With COURSE_IMPL=student exported, the package's modules hold the student's functions: the grader must not
    compare a student with themself."""
    assignments.write(tmp_path, solutions=True)
    path = tmp_path / "a4_distillation" / "student.py"
    path.write_text(path.read_text().replace("return temperature ** 2 * masked_mean(", "return masked_mean("))
    env = {**os.environ, "COURSE_IMPL": "student", "COURSE_ASSIGNMENTS": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "course_tools.grader", "A4"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1 and "the temperature and its T^2" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_every_stub_points_to_a_section_its_notebook_has():
    """The sections are typed in assignments.ASSIGNMENTS: a renamed heading must not leave a stub pointing nowhere."""
    import json
    from course_utils.paths import notebook_files
    headings = {}
    for path in notebook_files():
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        headings[path.name[:2]] = [line.lstrip("#").strip() for c in cells if c["cell_type"] == "markdown"
                                   for line in "".join(c["source"]).splitlines() if line.startswith("#")]
    for a in assignments.ASSIGNMENTS.values():
        for g in a.functions:
            assert any(h.startswith(g.section) for h in headings[g.notebook]), (g.name, g.section)
