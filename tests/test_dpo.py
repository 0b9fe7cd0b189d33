"""DPO and its family: the losses against independent computations and TRL, pairs, implicit rewards."""
import copy
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from course_utils import dpo, losses

DTYPES = [torch.float32, torch.float64]


def _logps(dtype, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [-(torch.rand(n, generator=g, dtype=dtype) * 30 + 1) for _ in range(4)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_dpo_loss_matches_the_formula(dtype):
    pc, pr, rc, rr = _logps(dtype)
    beta = 0.3
    out, chosen, rejected = losses.dpo_loss(pc, pr, rc, rr, beta)
    assert out.shape == (6,) and out.dtype == dtype
    for i in range(6):
        rw, rl = beta * (pc[i] - rc[i]).item(), beta * (pr[i] - rr[i]).item()
        assert math.isclose(chosen[i].item(), rw, rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(rejected[i].item(), rl, rel_tol=1e-5, abs_tol=1e-6)
        # -log sigmoid(x) = log(1 + exp(-x))
        assert math.isclose(out[i].item(), math.log1p(math.exp(-(rw - rl))), rel_tol=1e-5, abs_tol=1e-6)


def test_dpo_loss_at_the_start_is_log2_and_its_gradient_prefers_chosen():
    """Policy = reference: every pair's loss is log 2; the gradient raises chosen and lowers rejected."""
    pc, pr, rc, rr = _logps(torch.float64)
    pc, pr = rc.clone().requires_grad_(True), rr.clone().requires_grad_(True)
    out, chosen, rejected = losses.dpo_loss(pc, pr, rc, rr, beta=0.5)
    torch.testing.assert_close(out, torch.full_like(out, math.log(2)))
    assert not chosen.requires_grad and torch.all(chosen == 0) and torch.all(rejected == 0)
    out.mean().backward()
    assert torch.all(pc.grad < 0) and torch.all(pr.grad > 0)   # gradient descent: chosen up, rejected down
    torch.testing.assert_close(pc.grad, -pr.grad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ipo_and_simpo_match_their_formulas(dtype):
    pc, pr, rc, rr = _logps(dtype)
    torch.testing.assert_close(losses.ipo_loss(pc - rc, pr - rr, 0.25), ((pc - rc) - (pr - rr) - 2.0) ** 2)
    out, chosen, rejected = losses.simpo_loss(pc / 10, pr / 12, beta=2.0, gamma=0.5)
    torch.testing.assert_close(chosen, 2.0 * pc / 10)
    torch.testing.assert_close(out, F.softplus(-(2.0 * pc / 10 - 2.0 * pr / 12 - 0.5)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_simpo_matches_trl_cpo_loss(dtype):
    """TRL's CPOTrainer.cpo_loss with loss_type="simpo", driven on the same tensors."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.cpo import CPOTrainer
    pc, pr, _, _ = _logps(dtype)
    pc, pr = pc / 15, pr / 15
    fake = SimpleNamespace(alpha=0.0, loss_type="simpo", simpo_gamma=0.7, beta=2.5, label_smoothing=0.0,
                           accelerator=SimpleNamespace(device="cpu"))
    trl_losses, trl_chosen, trl_rejected = CPOTrainer.cpo_loss(fake, pc, pr)
    ours, chosen, rejected = losses.simpo_loss(pc, pr, beta=2.5, gamma=0.7)
    torch.testing.assert_close(ours, trl_losses)
    torch.testing.assert_close(chosen, trl_chosen)
    torch.testing.assert_close(rejected, trl_rejected)


def _pairs():
    return [dpo.pair_row(f"What is {a} plus {b}?", f"<think>{a} + {b}</think><answer>{a + b}</answer>",
                         f"<think>{a} + {b}</think><answer>{a + b + 1}</answer>") for a, b in [(12, 30), (7, 45), (60, 21)]]


@pytest.fixture(scope="module")
def tiny_pair(tokenizer):
    from course_utils.modeling import build_model
    return build_model(tokenizer, seed=0).float(), build_model(tokenizer, seed=1).float()


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_trl_dpo_trainer_loss_parity(tokenizer, tiny_pair, tmp_path, loss_type):
    """DPOTrainer's own compute_loss on its collated batch equals ours on the same tensors."""
    from dataclasses import replace

    from course_utils.run_config import get_profile
    from course_utils.recipes import DPORecipe
    from course_utils.training import dpo_trainer
    policy, reference = tiny_pair
    recipe = replace(DPORecipe(), loss_type=loss_type, beta=0.7)
    trainer = dpo_trainer(policy, reference, tokenizer, get_profile("cpu-tiny", seed=0), recipe, tmp_path, _pairs())
    out = dpo.trl_loss_parity(trainer, n_pairs=3)
    assert out["policy_chosen"].shape == (3,)
    assert not torch.equal(out["policy_chosen"], out["ref_chosen"])   # two different models: a real test
    torch.testing.assert_close(out["ours"], out["trl"], rtol=1e-5, atol=1e-5)


def test_precomputed_reference_logps_train_exactly_as_scoring_at_every_step(tokenizer, tiny_pair, tmp_path):
    """training.dpo_trainer scores the reference once up front: every logged number equals TRL's per-step scoring."""
    from dataclasses import replace

    from course_utils.run_config import get_profile, seed_everything
    from course_utils.recipes import DPORecipe
    from course_utils.training import dpo_trainer
    policy, reference = tiny_pair
    recipe = replace(DPORecipe(), steps=3, batch_size=2, learning_rate=1e-3)
    logs = {}
    for precompute in (True, False):
        seed_everything(0)
        trainer = dpo_trainer(copy.deepcopy(policy), reference, tokenizer, get_profile("cpu-tiny", seed=0), recipe,
                              tmp_path / str(precompute), _pairs() * 2, logging_steps=1,
                              precompute_reference=precompute)
        assert trainer.precompute_ref_logps is precompute
        trainer.train()
        logs[precompute] = [{k: v for k, v in h.items() if k.startswith(("loss", "rewards/", "logps/"))}
                            for h in trainer.state.log_history if "loss" in h]
    assert len(logs[True]) == 3 and logs[True][-1]["rewards/margins"] != 0   # it trained: the rewards moved
    assert logs[True] == logs[False]


def test_reference_logps_are_reused_for_the_same_pairs_and_reference_only(tokenizer, tiny_pair, tmp_path,
                                                                         monkeypatch):
    """A second dpo_trainer on the same pairs and reference gets the first one's scores without scoring again;
    other pairs or another reference are scored anew."""
    from dataclasses import replace

    from trl import DPOTrainer

    from course_utils import training
    from course_utils.run_config import get_profile
    from course_utils.recipes import DPORecipe
    policy, reference = tiny_pair
    recipe = replace(DPORecipe(), steps=1, batch_size=2)
    passes = []
    scored = DPOTrainer._precompute_ref_logps
    monkeypatch.setattr(DPOTrainer, "_precompute_ref_logps",
                        lambda self, *a, **k: passes.append(1) or scored(self, *a, **k))
    monkeypatch.setattr(training, "_REFERENCE_LOGPS", {})

    def ref_columns(ref, rows, folder):
        trainer = training.dpo_trainer(copy.deepcopy(policy), ref, tokenizer, get_profile("cpu-tiny", seed=0), recipe,
                                       tmp_path / folder, rows)
        return trainer.train_dataset["ref_chosen_logps"], trainer.train_dataset["ref_rejected_logps"]

    first = ref_columns(reference, _pairs() * 2, "a")
    assert ref_columns(copy.deepcopy(reference), _pairs() * 2, "b") == first and len(passes) == 1   # reused, exactly
    ref_columns(reference, _pairs(), "c")                                    # other pairs: scored
    assert len(passes) == 2
    other = copy.deepcopy(reference)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    assert ref_columns(other, _pairs() * 2, "d") != first and len(passes) == 3   # another reference: scored


def test_pair_logps_and_implicit_reward_accuracy(tokenizer, tiny_pair):
    policy, reference = tiny_pair
    rows = _pairs()
    chosen, rejected = dpo.pair_logps(policy, tokenizer, rows)
    assert chosen.shape == rejected.shape == (3,) and torch.all(chosen < 0)
    avg_chosen, _ = dpo.pair_logps(policy, tokenizer, rows, average=True)
    assert torch.all(avg_chosen > chosen)            # averaging divides a negative sum by > 1 tokens
    same = dpo.implicit_reward_accuracy(policy, tokenizer, rows, reference=policy)
    assert same == {"accuracy": 0.5, "margin": 0.0}  # policy = reference: every pair is a tie
    other = dpo.implicit_reward_accuracy(policy, tokenizer, rows, reference=reference)
    ref_chosen, ref_rejected = dpo.pair_logps(reference, tokenizer, rows)
    expected = ((chosen - ref_chosen) > (rejected - ref_rejected)).float().mean().item()
    assert math.isclose(other["accuracy"], expected)
    with pytest.raises(ValueError):
        dpo.implicit_reward_accuracy(policy, tokenizer, [])


def test_self_generated_pairs_pair_a_right_answer_with_a_wrong_one(tokenizer, tiny_pair, monkeypatch):
    from course_utils.generation import Completions
    texts = ["<think>1</think><answer>5</answer>", "<think>1</think><answer>4</answer>",   # problem 1: mixed
             "<think>1</think><answer>9</answer>", "<think>1</think><answer>8</answer>"]   # problem 2: all wrong

    def fake_sample(model, tok, prompts, num_samples, **kwargs):
        assert num_samples == 2 and len(prompts) == 2
        return Completions(texts=texts, prompt_ids=None, prompt_mask=None, completion_ids=None,
                           completion_mask=None, logps=None, num_samples=2)
    monkeypatch.setattr(dpo, "sample_completions", fake_sample)
    problems = [{"question": "2 + 3?", "answer": "5"}, {"question": "3 + 4?", "answer": "7"}]
    rows, stats = dpo.self_generated_pairs(tiny_pair[0], tokenizer, problems, samples_per_prompt=2)
    assert len(rows) == 1
    assert rows[0]["chosen"][0]["content"] == texts[0] and rows[0]["rejected"][0]["content"] == texts[1]
    assert stats == {"problems": 2, "samples": 4, "sample_accuracy": 0.25, "pairs": 1, "all_right": 0.0,
                     "all_wrong": 0.5, "reference_pairs": 0}
    with pytest.raises(ValueError):
        dpo.self_generated_pairs(tiny_pair[0], tokenizer, problems, samples_per_prompt=1)
    # a policy that is never right: each demonstration is chosen against the policy's first answer
    texts[0] = "<think>1</think><answer>6</answer>"
    problems = [dict(p, completion=f"<think>ref</think><answer>{p['answer']}</answer>") for p in problems]
    rows, stats = dpo.self_generated_pairs(tiny_pair[0], tokenizer, problems, samples_per_prompt=2)
    assert [(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows] == [
        (problems[0]["completion"], texts[0]), (problems[1]["completion"], texts[2])]
    assert stats["reference_pairs"] == stats["pairs"] == 2 and stats["sample_accuracy"] == 0.0


# --------------------------------------------------------------------------- measuring a policy
def _profile(eval_size=200, max_new_tokens=37):
    from dataclasses import replace

    from course_utils.run_config import get_profile
    return replace(get_profile("cpu-tiny", seed=5), eval_size=eval_size, max_new_tokens=max_new_tokens)


def test_evaluate_policy_takes_size_and_budget_from_the_profile(tokenizer, tiny_pair, monkeypatch):
    """Greedy answers and the KL use the profile's test size and budget (200 and 37 here), the KL last; the
    preference accuracies are the implicit reward's, against the reference or (SimPO) without one."""
    from course_utils import evaluation, experiment
    policy, reference = tiny_pair
    calls = []

    def fake_generate(model, tok, prompts, max_new_tokens, **kw):
        calls.append(("greedy", len(prompts), max_new_tokens))
        return ["<think>1 + 1 = 2</think><answer>2</answer>"] * len(prompts)

    def fake_kl(model, ref, tok, *, n, max_new_tokens, **kw):
        calls.append(("kl", n, max_new_tokens, ref is reference))
        return {"kl": 0.25}

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(dpo, "kl_to_reference", fake_kl)
    rows, offline = _pairs(), _pairs()[:2]
    ev = dpo.evaluate_policy(policy, tokenizer, _profile(), reference, rows, offline)
    assert calls == [("greedy", 200, 37), ("kl", 200, 37, True)]
    assert isinstance(ev, experiment.Eval) and ev.n == 200 and ev.accuracy == 0.0 and ev.kl == 0.25
    assert ev.pref_accuracy == dpo.implicit_reward_accuracy(policy, tokenizer, rows, reference=reference)["accuracy"]
    assert ev.offline_pref_accuracy == dpo.implicit_reward_accuracy(policy, tokenizer, offline,
                                                                    reference=reference)["accuracy"]
    summary = ev.summary()
    assert {"accuracy", "failures", "pref_accuracy", "offline_pref_accuracy", "kl"} <= set(summary)
    assert "correct" not in summary

    calls.clear()
    free = dpo.evaluate_policy(policy, tokenizer, _profile(300, 11), reference, rows, reference_free=True)
    assert calls == [("greedy", 300, 11), ("kl", 300, 11, True)]   # the KL is still to the reference
    assert free.offline_pref_accuracy is None
    assert free.pref_accuracy == dpo.implicit_reward_accuracy(policy, tokenizer, rows)["accuracy"]   # SimPO's reward
    runs = experiment.Runs()
    row = runs.add("simpo", free, show=False)
    assert row["pref_accuracy"] == free.pref_accuracy and row["kl"] == 0.25


def test_sampled_failures_take_the_profile_and_reseed(tokenizer, tiny_pair, monkeypatch):
    from course_utils.generation import Completions
    seeds, calls = [], []

    def fake_sample(model, tok, prompts, num_samples, temperature, max_new_tokens, **kw):
        calls.append((len(prompts), num_samples, temperature, max_new_tokens))
        # per problem: one right-looking but wrong sum, one without tags
        texts = ["<think>1 + 1 = 2</think><answer>2</answer>", "2"] * len(prompts)
        return Completions(texts, None, None, None, None, None, num_samples)

    monkeypatch.setattr(dpo, "sample_completions", fake_sample)
    monkeypatch.setattr(dpo, "seed_everything", seeds.append)
    failures = dpo.sampled_failures(tiny_pair[0], tokenizer, _profile(250, 21))
    assert calls == [(250, 2, 1.0, 21)] and seeds == [5]
    assert math.isclose(sum(failures.values()), 1.0)
    assert failures["format error"] == 0.5 and failures["correct"] == 0.0


def test_fraction_table_prints_counts_and_percentages():
    stats = {"train": {"problems": 3000, "sample_accuracy": 0.4567, "pairs": 1250},
             "held-out": {"problems": 300, "sample_accuracy": 0.5, "pairs": 120}}
    text = dpo.fraction_table(stats, {"problems": "problems", "sample_accuracy": "right", "pairs": "pairs"}, "set")
    assert text.splitlines() == ["| set | problems | right | pairs |", "|---|---|---|---|",
                                 "| train | 3,000 | 45.7% | 1,250 |", "| held-out | 300 | 50.0% | 120 |"]
