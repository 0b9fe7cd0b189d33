"""Notebook 13's pieces against TRL and transformers on the same tensors: the high-entropy token mask, DAPO's soft
overlong punishment, top-k / top-p truncation and its log-probs; the random and length rewards; the estimators."""
import types

import pytest
import torch

from course_utils import losses, rl_failures


class _OneProcess:
    """What TRL's ``get_high_entropy_mask`` asks of its accelerator, on one process: gathering is the identity."""

    @staticmethod
    def pad_across_processes(tensor, dim=0, pad_index=0):
        return tensor

    @staticmethod
    def gather(tensor):
        return tensor


@pytest.mark.parametrize("top_quantile", [0.2, 0.5, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_high_entropy_mask_is_trls(top_quantile, dtype):
    from trl import GRPOTrainer
    g = torch.Generator().manual_seed(0)
    entropies = torch.rand(6, 9, generator=g, dtype=dtype) * 3
    mask = (torch.rand(6, 9, generator=g) > 0.3).long()
    mask[0] = 0                                                                        # a row with no valid token
    ours = rl_failures.high_entropy_mask(entropies, mask, top_quantile)
    theirs = GRPOTrainer.get_high_entropy_mask(types.SimpleNamespace(accelerator=_OneProcess()), entropies, mask,
                                                1 - top_quantile)
    assert torch.equal(ours, theirs)
    kept = ours.sum() / mask.sum()
    assert abs(float(kept) - top_quantile) <= 1.5 / float(mask.sum())                # about the top share (both
    # compare with a float32 threshold, as TRL does: a float64 entropy at the edge can fall just below it)
    assert not ours[mask == 0].any()


def test_the_high_entropy_mask_keeps_the_highest():
    entropies = torch.tensor([[0.1, 2.0, 0.5, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert rl_failures.high_entropy_mask(entropies, mask, 0.5).tolist() == [[False, True, False, True, False]]
    assert not rl_failures.high_entropy_mask(entropies, torch.zeros_like(mask), 0.5).any()
    with pytest.raises(ValueError, match="top_quantile"):
        rl_failures.high_entropy_mask(entropies, mask, 0.0)


@pytest.mark.parametrize("max_len, cache", [(48, 16), (100, 20), (10, 0), (10, 10)])
def test_the_soft_overlong_punishment_is_trls(max_len, cache):
    from trl.rewards import get_soft_overlong_punishment
    ids = [[1] * n for n in range(0, max_len + 5)]
    ours = rl_failures.SoftOverlongPunishment(max_len, cache)(completion_ids=ids)
    theirs = get_soft_overlong_punishment(max_len, cache)(completion_ids=ids)
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs, dtype=torch.float32))


def test_the_soft_overlong_punishment_by_hand():
    # DAPO's eq. 13 with L_max 48, L_cache 16: free up to 32 tokens, then a ramp to -1 at 48, -1 beyond
    got = rl_failures.soft_overlong_punishment([10, 32, 33, 40, 48, 60], 48, 16)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -1 / 16, -0.5, -1.0, -1.0]))
    with pytest.raises(ValueError, match="cache"):
        rl_failures.soft_overlong_punishment([1], 8, 9)


def test_the_random_reward_ignores_the_completion_and_is_its_own_stream():
    torch.manual_seed(0)
    before = torch.rand(1)
    reward = rl_failures.RandomReward(0.5, seed=3)
    draws = reward(["<think>1 + 1 = 2</think><answer>2</answer>"] * 4000)
    assert set(draws) == {0.0, 1.0} and abs(sum(draws) / len(draws) - 0.5) < 0.03
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), before)                                          # the global stream untouched
    again = rl_failures.RandomReward(0.5, seed=3)(["anything"] * 4000)
    assert again == draws and reward.__name__ == "random_reward"
    assert rl_failures.RandomReward(0.0)(["x"] * 5) == [0.0] * 5


def test_fixed_and_broken():
    assert rl_failures.fixed_and_broken([True, False, False, True], [True, True, False, False]) == (1, 1)
    assert rl_failures.fixed_and_broken([False] * 3, [True] * 3) == (3, 0)
    with pytest.raises(ValueError):
        rl_failures.fixed_and_broken([True], [True, False])


def test_paired_t():
    assert rl_failures.paired_t([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 0.0
    assert rl_failures.paired_t([0.0, 0.0], [1.0, 1.0]) == float("inf")
    before, after = [0.0, 1.0, 2.0, 3.0], [0.5, 1.0, 3.0, 3.5]   # differences 0.5, 0, 1, 0.5: mean 0.5, sd sqrt(1/6)
    assert rl_failures.paired_t(before, after) == pytest.approx(0.5 / ((1 / 6) ** 0.5 / 2))
    assert rl_failures.paired_t(after, before) == pytest.approx(-rl_failures.paired_t(before, after))
    with pytest.raises(ValueError, match="different problems"):
        rl_failures.paired_t([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least 2"):
        rl_failures.paired_t([1.0], [2.0])


def test_paired_z():
    assert rl_failures.paired_z(0, 0) == 0.0
    assert rl_failures.paired_z(1, 2) == pytest.approx(-1 / 3 ** 0.5)
    assert rl_failures.paired_z(9, 0) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        rl_failures.paired_z(-1, 2)


def _warped(logits, top_k, top_p):
    from transformers.generation.logits_process import LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper
    warpers = LogitsProcessorList(([TopKLogitsWarper(top_k)] if top_k else [])
                                  + ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    return warpers(None, logits.clone())


@pytest.mark.parametrize("top_k, top_p", [(0, 0.9), (0, 0.5), (5, 1.0), (5, 0.8), (1, 1.0), (0, 1.0)])
def test_truncation_is_generates(top_k, top_p):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 40, generator=g) * 2
    ours = rl_failures.truncate_logits(logits, top_k, top_p)
    theirs = _warped(logits, top_k, top_p)
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    torch.testing.assert_close(ours.masked_fill(torch.isinf(ours), 0), theirs.masked_fill(torch.isinf(theirs), 0))
    kept = torch.softmax(logits, -1).masked_fill(torch.isinf(ours), 0).sum(-1)
    if top_p < 1 and not top_k:
        assert (kept >= top_p - 1e-6).all()                                          # the kept set reaches p


def test_truncated_logps_by_the_formula():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, 7, 30, generator=g) * 2
    T, top_p = 0.8, 0.7
    train_all = torch.log_softmax(logits / T, -1)
    tokens = train_all.argmax(-1)                                                      # the most likely: always kept
    train, sample = rl_failures.truncated_logps(logits, tokens, T, top_p=top_p)
    torch.testing.assert_close(train, train_all.gather(-1, tokens[..., None])[..., 0])
    warped = _warped((logits / T).view(-1, 30), 0, top_p).view(3, 7, 30)
    kept_mass = torch.logsumexp(train_all.masked_fill(torch.isinf(warped), float("-inf")), -1)
    torch.testing.assert_close(train - sample, kept_mass)                               # log pi_train/pi_sample
    assert (train - sample <= 1e-6).all()


def test_truncated_logps_at_another_sampler_temperature():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, 30, generator=g) * 2
    tokens = torch.randint(0, 30, (2, 5), generator=g)
    train, sample = rl_failures.truncated_logps(logits, tokens, 0.8, sampler_temperature=0.5)
    torch.testing.assert_close(train, torch.log_softmax(logits / 0.8, -1).gather(-1, tokens[..., None])[..., 0])
    torch.testing.assert_close(sample, torch.log_softmax(logits / 0.5, -1).gather(-1, tokens[..., None])[..., 0])
    likely = torch.log_softmax(logits, -1).argmax(-1)                                  # a colder sampler over-draws it
    train_top, sample_top = rl_failures.truncated_logps(logits, likely, 0.8, sampler_temperature=0.5)
    assert (train_top < sample_top).all()
    same = rl_failures.truncated_logps(logits, tokens, 0.8, sampler_temperature=0.8)
    torch.testing.assert_close(same[0], same[1])                                       # one temperature: one policy


def test_reward_estimates_weight_each_completion():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    mask = torch.ones(4, 3)
    train = torch.log(torch.full((4, 3), 0.5))
    sample = train.clone()
    sample[0] = torch.log(torch.tensor(0.9))                                          # the sampler liked row 0 more
    got = rl_failures.reward_estimates(rewards, train, sample, mask)
    w = losses.sampler_is_weight(train, sample, mask, "sequence_truncate", None, 3.0).squeeze(-1)
    assert got["naive"] == 0.75
    assert got["corrected"] == pytest.approx(float((w * rewards).mean()))
    assert got["corrected"] < got["naive"] and w[1:].eq(1).all()


def test_sample_truncated_draws_inside_the_set_and_the_weights_are_at_most_one(tokenizer):
    from course_utils.modeling import build_model
    model = build_model(tokenizer, seed=0).float().eval()
    torch.manual_seed(0)
    out = rl_failures.sample_truncated(model, tokenizer, ["What is 2 plus 3?", "What is 10 plus 7?"], num_samples=3,
                                       temperature=1.0, top_p=0.5, max_new_tokens=6)
    mask = out["completions"].completion_mask.bool()
    assert out["outside"] == 0
    diff = (out["train_logps"] - out["sample_logps"])[mask]
    assert (diff <= 1e-5).all() and (diff < -1e-3).any()                             # the sampler cut mass away
    full = rl_failures.sample_truncated(model, tokenizer, ["What is 2 plus 3?"], num_samples=2, temperature=1.0,
                                        max_new_tokens=6)
    torch.testing.assert_close(full["train_logps"], full["sample_logps"])            # no truncation: one policy


def test_gap_of_a_curve():
    assert rl_failures.gap({1: 0.4, 4: 0.6, 8: 0.7}) == pytest.approx(0.3)
    assert rl_failures.gap({1: 0.4, 4: 0.6, 8: 0.7}, high=4) == pytest.approx(0.2)


def test_the_pass_at_k_curve_rises_with_k_and_counts_per_problem(tokenizer):
    from dataclasses import replace

    from course_utils.modeling import build_model
    from course_utils.run_config import get_profile
    model = build_model(tokenizer, seed=0).float()
    profile = replace(get_profile("cpu-tiny", seed=0), eval_size=200, max_new_tokens=4)
    got = rl_failures.pass_at_k_curve(model, tokenizer, profile, ks=[1, 2, 4])
    assert got["num_samples"] == 4 and got["right"].shape == (200,) and list(got["curve"]) == [1, 2, 4]
    values = list(got["curve"].values())
    assert values == sorted(values) and all(0.0 <= v <= 1.0 for v in values)
    with pytest.raises(ValueError, match="ks"):
        rl_failures.pass_at_k_curve(model, tokenizer, profile, ks=[0, 2])
