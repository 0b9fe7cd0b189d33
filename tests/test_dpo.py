"""DPO and its family: the losses against independent computations and TRL, pairs, implicit rewards."""
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

    from course_utils.profile import get_profile
    from course_utils.recipes import DPORecipe
    from course_utils.training import dpo_trainer
    policy, reference = tiny_pair
    recipe = replace(DPORecipe(), loss_type=loss_type, beta=0.7)
    trainer = dpo_trainer(policy, reference, tokenizer, get_profile("cpu-tiny", seed=0), recipe, tmp_path, _pairs())
    out = dpo.trl_loss_parity(trainer, n_pairs=3)
    assert out["policy_chosen"].shape == (3,)
    assert not torch.equal(out["policy_chosen"], out["ref_chosen"])   # two different models: a real test
    torch.testing.assert_close(out["ours"], out["trl"], rtol=1e-5, atol=1e-5)


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
                     "all_wrong": 0.5}
    with pytest.raises(ValueError):
        dpo.self_generated_pairs(tiny_pair[0], tokenizer, problems, samples_per_prompt=1)
