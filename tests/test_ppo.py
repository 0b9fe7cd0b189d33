"""PPO: the losses against independent computations, the phases, one real update on a tiny model."""
import math

import pytest
import torch

from course_utils import losses, ppo
from course_utils.generation import Completions
from course_utils.recipes import PPORecipe

DTYPES = [torch.float32, torch.float64]


def _batch(dtype, B=3, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 4:] = 0          # a row that ends early
    mask[2, 2:] = 0
    return g, mask, torch.randn(B, T, generator=g, dtype=dtype), torch.randn(B, T, generator=g, dtype=dtype)


def _kept(mask):
    """The (row, token) positions where the mask is 1."""
    return [(b, t) for b in range(mask.size(0)) for t in range(mask.size(1)) if mask[b, t]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_kl_estimators(dtype):
    g = torch.Generator().manual_seed(1)
    logps = -torch.rand(5, 4, generator=g, dtype=dtype) * 3
    ref = -torch.rand(5, 4, generator=g, dtype=dtype) * 3
    for i in range(5):
        for j in range(4):
            lp, lr = float(logps[i, j]), float(ref[i, j])
            assert math.isclose(losses.kl_estimate(logps, ref, "k1")[i, j].item(), lp - lr, rel_tol=1e-5, abs_tol=1e-6)
            assert math.isclose(losses.kl_estimate(logps, ref, "k2")[i, j].item(), 0.5 * (lp - lr) ** 2,
                                rel_tol=1e-5, abs_tol=1e-6)
            r = math.exp(lr - lp)
            assert math.isclose(losses.kl_estimate(logps, ref, "k3")[i, j].item(), r - math.log(r) - 1,
                                rel_tol=1e-4, abs_tol=1e-6)
    assert (losses.kl_estimate(logps, ref, "k3") >= 0).all() and (losses.kl_estimate(logps, ref, "k2") >= 0).all()
    with pytest.raises(ValueError, match="kind"):
        losses.kl_estimate(logps, ref, "k4")


def test_kl_estimators_are_unbiased_where_promised():
    """Sampling from p, k1 and k3 average to KL(p||q); k2 does not in general."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    exact = float((p * (p / q).log()).sum())
    x = torch.multinomial(p, 400_000, replacement=True, generator=g)
    logp, logq = p.log()[x], q.log()[x]
    assert abs(losses.kl_estimate(logp, logq, "k1").mean().item() - exact) < 0.01
    assert abs(losses.kl_estimate(logp, logq, "k3").mean().item() - exact) < 0.01
    assert abs(losses.kl_estimate(logp, logq, "k2").mean().item() - exact) > 0.05


@pytest.mark.parametrize("dtype", DTYPES)
def test_gae_matches_the_sum_of_discounted_deltas(dtype):
    _, mask, rewards, values = _batch(dtype)
    gamma, lam = 0.9, 0.8
    adv, ret = losses.gae(rewards, values, gamma, lam, mask)
    assert adv.dtype == dtype
    for b in range(3):
        n = int(mask[b].sum())
        r, v = rewards[b, :n].tolist(), values[b, :n].tolist() + [0.0]   # value after the last token: 0
        deltas = [r[t] + gamma * v[t + 1] - v[t] for t in range(n)]
        for t in range(n):
            want = sum((gamma * lam) ** k * deltas[t + k] for k in range(n - t))
            assert math.isclose(adv[b, t].item(), want, rel_tol=1e-5, abs_tol=1e-5)
            assert math.isclose(ret[b, t].item(), want + v[t], rel_tol=1e-5, abs_tol=1e-5)
        assert (adv[b, n:] == 0).all() and (ret[b, n:] == 0).all()


def test_gae_limits():
    """lam = 1, gamma = 1: advantage = reward-to-go − V; lam = 0: the one-step TD error."""
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.5, 0.7]])
    adv, ret = losses.gae(rewards, values, 1.0, 1.0)
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0]]))
    adv0, _ = losses.gae(rewards, values, 1.0, 0.0)
    torch.testing.assert_close(adv0, torch.tensor([[0.3, 0.2, 0.3]]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ppo_policy_loss_against_the_min_of_objectives(dtype):
    g, mask, adv, _ = _batch(dtype)
    old = -torch.rand(3, 6, generator=g, dtype=dtype)
    new = old + 0.4 * torch.randn(3, 6, generator=g, dtype=dtype)
    loss, clipfrac = losses.ppo_policy_loss(new, old, adv, mask, 0.2)
    objectives, clipped = [], []
    for b, t in _kept(mask):
        rho, a = math.exp(new[b, t] - old[b, t]), adv[b, t].item()
        objectives.append(min(rho * a, min(max(rho, 0.8), 1.2) * a))
        clipped.append(min(max(rho, 0.8), 1.2) * a < rho * a)
    assert math.isclose(loss.item(), -sum(objectives) / len(objectives), rel_tol=1e-5)
    assert math.isclose(clipfrac.item(), sum(clipped) / len(clipped), rel_tol=1e-6)


def test_ppo_policy_loss_at_ratio_one_has_the_gradient_of_the_advantage():
    """At the first minibatch ρ = 1, yet the gradient is −A·∇log π, not 0."""
    logits = torch.randn(2, 4, requires_grad=True)
    adv = torch.tensor([[1.0, -2.0, 0.5, 0.0], [0.3, 0.3, -1.0, 2.0]])
    mask = torch.ones(2, 4)
    loss, clipfrac = losses.ppo_policy_loss(logits, logits.detach(), adv, mask, 0.2)
    loss.backward()
    assert clipfrac.item() == 0
    torch.testing.assert_close(logits.grad, -adv / 8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ppo_value_loss_against_elementwise(dtype):
    g, mask, values, returns = _batch(dtype, seed=3)
    old = values + 0.5 * torch.randn(3, 6, generator=g, dtype=dtype)
    loss, clipfrac = losses.ppo_value_loss(values, old, returns, mask, 0.2)
    errors, clipped = [], []
    for b, t in _kept(mask):
        v, vo, r = values[b, t].item(), old[b, t].item(), returns[b, t].item()
        vc = min(max(v, vo - 0.2), vo + 0.2)
        errors.append(max((v - r) ** 2, (vc - r) ** 2))
        clipped.append((vc - r) ** 2 > (v - r) ** 2)
    assert math.isclose(loss.item(), 0.5 * sum(errors) / len(errors), rel_tol=1e-5)
    assert math.isclose(clipfrac.item(), sum(clipped) / len(clipped), rel_tol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_whiten(dtype):
    _, mask, values, _ = _batch(dtype)
    out = losses.masked_whiten(values, mask)
    kept = values[mask.bool()]
    torch.testing.assert_close(out[mask.bool()], (kept - kept.mean()) / kept.std(), rtol=1e-4, atol=1e-5)
    assert (out[~mask.bool()] == 0).all()


def test_shaped_rewards_put_the_score_on_the_last_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]).float()
    logps = torch.full((2, 4), -1.0) * mask
    ref = torch.full((2, 4), -1.5) * mask
    rewards, kl = ppo.shaped_rewards(torch.tensor([2.0, -1.0]), logps, ref, mask, kl_coef=0.1)
    torch.testing.assert_close(kl, 0.5 * mask)
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, -0.05, 1.95, 0.0], [-0.05, -0.05, -0.05, -1.05]]))


def test_explained_variance():
    mask = torch.ones(1, 4)
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert ppo.explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert ppo.explained_variance(torch.full_like(returns, 2.5), returns, mask) == pytest.approx(0.0)


@pytest.fixture(scope="module")
def tiny_models(tokenizer):
    from transformers import AutoModelForSequenceClassification
    from course_utils.modeling import build_model
    policy = build_model(tokenizer, seed=0)
    ref = build_model(tokenizer, seed=0)
    value = AutoModelForSequenceClassification.from_config(policy.config.__class__(**{**policy.config.to_dict(),
                                                                                          "num_labels": 1}))
    return policy, ref, value


def test_one_ppo_update_moves_the_parameters_and_lowers_its_loss(tokenizer, tiny_models):
    policy, ref, value = tiny_models
    torch.manual_seed(0)
    model = ppo.PolicyAndValue(policy, value)
    recipe = PPORecipe(rollouts_per_step=8, minibatch_size=8, ppo_epochs=1, max_new_tokens=8, learning_rate=1e-2)
    problems = [{"question": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3)} for i in range(8)]
    score_fn = lambda texts, probs: torch.linspace(-1, 1, len(texts))   # any non-constant score
    batch = ppo.make_rollouts(model, ref, tokenizer, problems, score_fn, recipe)
    assert batch.advantages.shape == batch.mask.shape == batch.values.shape

    def loss_on_batch():
        with torch.no_grad():
            logps, values, _ = ppo.policy_value_forward(model, batch.completions)
            m = batch.mask.float()
            pg, _ = losses.ppo_policy_loss(logps, batch.logps, batch.advantages, m, recipe.clip_range)
            vf, _ = losses.ppo_value_loss(values, batch.values, batch.returns, m, recipe.clip_range_value)
        return (pg + recipe.vf_coef * vf).item()

    before = [p.detach().clone() for p in model.parameters()]
    loss_before = loss_on_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    stats = ppo.ppo_update(model, optimizer, batch, recipe)
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-4)        # first minibatch: π = π_old
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert loss_on_batch() < loss_before


def test_finished_detects_cut_off_completions():
    ids = torch.tensor([[5, 6, 2, 0], [5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    c = Completions(["a", "b"], torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1, dtype=torch.long), ids, mask,
                    None, 1)
    assert ppo.finished(c, [2]).tolist() == [True, False]


def test_make_optimizer_puts_the_critic_in_its_own_group(tiny_models):
    policy, _, value = tiny_models
    model = ppo.PolicyAndValue(policy, value)
    same = ppo.make_optimizer(model, PPORecipe(learning_rate=2e-5, value_learning_rate=None))
    assert [g["lr"] for g in same.param_groups] == [2e-5, 2e-5]           # None: TRL's one learning rate
    split = ppo.make_optimizer(model, PPORecipe(learning_rate=2e-5, value_learning_rate=1e-3))
    assert [g["lr"] for g in split.param_groups] == [2e-5, 1e-3]
    grouped = [id(p) for g in split.param_groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters())   # every parameter once, none twice
    assert {id(p) for p in split.param_groups[1]["params"]} == {id(p) for p in value.parameters()}


# --------------------------------------------------------------------------- what notebook 05 measures and shows
def test_reward_model_scorer_gives_the_training_scores_in_evaluates_argument_order(tokenizer, tiny_models):
    from course_utils import experiment
    from course_utils.evaluation import RewardModelScorer, score_completions
    _, _, reward_model = tiny_models
    problems = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "What is 10 + 7?", "answer": "17"},
                {"question": "What is 4 + 4?", "answer": "8"}]
    texts = ["<think>2 + 3 = 5</think><answer>5</answer>", "<answer>18</answer>", "no tags at all"]
    scorer = RewardModelScorer(reward_model, tokenizer)
    scores = scorer([p["question"] for p in problems], texts)
    trained_on = ppo.reward_model_scores(reward_model, tokenizer)(texts, problems)
    assert isinstance(scores, list) and len(scores) == 3 and len(set(scores)) == 3    # three different answers
    assert scores == pytest.approx(trained_on.tolist(), abs=0)
    swapped = scorer([p["question"] for p in problems][::-1], texts[::-1])            # pairs travel together
    assert swapped == pytest.approx(scores[::-1], abs=1e-6)
    assert scores == pytest.approx(score_completions(reward_model, tokenizer, [p["question"] for p in problems],
                                                     texts).tolist(), abs=0)
    ev_score = sum(scores) / len(scores)                                               # what Eval.score holds
    assert ev_score == pytest.approx(float(trained_on.mean()), rel=1e-6)
    assert "scorer" in experiment.evaluate.__code__.co_varnames                         # the signature it serves



def test_changed_answers_lists_only_the_answers_that_changed():
    before = [{"question": "What is 1 + 1?", "completion": "<answer>3</answer>", "correct": False},
              {"question": "What is 2 + 2?", "completion": "<answer>4</answer>", "correct": True},
              {"question": "What is 3 + 3?", "completion": "a | b\nc", "correct": False}]
    after = [{**before[0], "completion": "<answer>2</answer>", "correct": True}, before[1],
             {**before[2], "completion": "x | y", "correct": False}]
    text = ppo.changed_answers(before, after)
    lines = text.splitlines()
    assert lines[0] == "2 of 3 greedy answers changed; the first 2:"
    assert lines[4] == "| What is 1 + 1? | `<answer>3</answer>` | ✗ | `<answer>2</answer>` | ✓ |"
    assert lines[5] == "| What is 3 + 3? | `a \\| b c` | ✗ | `x \\| y` | ✗ |"      # a cell stays one cell
    assert len(lines) == 6 and "2 + 2" not in text
    assert ppo.changed_answers(before, after, k=1).splitlines()[0].endswith("the first 1:")
    assert ppo.changed_answers(before, before) == "0 of 3 greedy answers changed."
    with pytest.raises(ValueError, match="same problems"):
        ppo.changed_answers(before, after[::-1])


def test_policy_and_value_on_learned_positions_match_sampling_and_trl_get_reward():
    """GPT-2 (learned positions, dropout 0.1) with left-padded prompts: the training pass numbers positions as
    sampling did (ratio 1 before any update) and as TRL's ``get_reward`` does (the same values)."""
    import copy
    import os

    from transformers import AutoModelForSequenceClassification

    from course_utils.adapt import adapt
    from course_utils.modeling import family_model
    from course_utils.modeling import disable_dropout
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.utils import get_reward

    policy, tokenizer = family_model("gpt2")
    adapt(policy, tokenizer)
    config = copy.deepcopy(policy.config)
    config.num_labels, config.pad_token_id = 1, tokenizer.pad_token_id
    value = AutoModelForSequenceClassification.from_config(config)
    disable_dropout(policy, value)
    model = ppo.PolicyAndValue(policy, value)
    problems = [{"question": q, "answer": "0"} for q in ("What is 2 + 3?", "Ana has 12 apples and buys 30 more. "
                                                          "How many apples does she have now?")]
    torch.manual_seed(0)
    probe = ppo.rollout(policy, tokenizer, problems, PPORecipe(samples_per_prompt=1, max_new_tokens=6))
    assert (probe.attention_mask[:, 0] == 0).any()                    # a left-padded prompt: the case at stake
    prompt_len = probe.prompt_ids.size(1)
    query_responses = probe.input_ids.masked_fill(probe.attention_mask == 0, tokenizer.pad_token_id)
    with torch.no_grad():
        logps, values, _ = ppo.policy_value_forward(model, probe)
        trl_values, _, _ = get_reward(value, query_responses, tokenizer.pad_token_id, prompt_len)
    mask = probe.completion_mask.bool()
    torch.testing.assert_close(values[mask], trl_values[:, prompt_len - 1:-1, 0][mask], atol=1e-4, rtol=1e-4)
    for b in range(len(problems)):                   # each row alone, without its padding, as it was sampled
        keep = probe.attention_mask[b].bool()
        with torch.no_grad():
            alone = torch.log_softmax(policy(input_ids=probe.input_ids[b][keep][None]).logits[0], -1)
        for t in mask[b].nonzero().flatten().tolist():
            k = int(keep[:prompt_len + t].sum())     # the token's index in the unpadded row
            want = alone[k - 1, probe.input_ids[b, prompt_len + t]]
            torch.testing.assert_close(logps[b, t], want, atol=1e-4, rtol=1e-4)
