"""GRPO: advantages and loss against independent loops and against TRL 1.15's GRPOTrainer on its own batch."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from course_utils import evaluation, grpo, losses, rewards

DTYPES = [torch.float32, torch.float64]


def _reference_advantages(r, G, scale):
    """Plain Python over groups (statistics by hand, n - 1 in the std)."""
    r = [float(x) for x in r]
    out = []
    allr = np.array(r)
    batch_std = np.sqrt(((allr - allr.mean()) ** 2).sum() / (len(r) - 1))
    for start in range(0, len(r), G):
        g = r[start:start + G]
        mean = sum(g) / G
        std = (sum((x - mean) ** 2 for x in g) / (G - 1)) ** 0.5
        for x in g:
            a = x - mean
            out.append(a if scale == "none" else a / ((std if scale == "group" else batch_std) + 1e-4))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_advantages_match_a_loop(dtype, scale):
    g = torch.Generator().manual_seed(0)
    r = (torch.rand(24, generator=g, dtype=dtype) > 0.5).to(dtype) + torch.rand(24, generator=g, dtype=dtype) * 0.1
    r[:6] = 1.0                                        # one group with equal rewards: advantage 0
    ours = losses.grpo_advantages(r, 6, scale)
    np.testing.assert_allclose(ours.numpy(), _reference_advantages(r, 6, scale), rtol=1e-5, atol=1e-6)
    assert torch.all(ours[:6] == 0) and ours.dtype == dtype


def test_grpo_advantages_reject_bad_input():
    with pytest.raises(ValueError, match="whole groups"):
        losses.grpo_advantages(torch.ones(7), 4)
    with pytest.raises(ValueError, match="scale"):
        losses.grpo_advantages(torch.ones(8), 4, "groups")


def _reference_loss(logps, old, ref, adv, mask, beta, el, eh, loss_type, level, L, correct=True):
    """Per completion, per token, in float64 NumPy."""
    logps, old, ref, adv, mask = (np.asarray(x, dtype=np.float64) for x in (logps, old, ref, adv, mask))
    B, T = logps.shape
    per = np.zeros((B, T))
    for i in range(B):
        n = mask[i].sum()
        seq_ratio = np.exp(sum((logps[i, t] - old[i, t]) * mask[i, t] for t in range(T)) / max(n, 1))
        for t in range(T):
            rho = seq_ratio if level == "sequence" else np.exp(logps[i, t] - old[i, t])
            term = -min(rho * adv[i], min(max(rho, 1 - el), 1 + eh) * adv[i])
            d = ref[i, t] - logps[i, t]
            per[i, t] = (term + beta * (np.exp(d) - d - 1) * (rho if correct else 1.0)) * mask[i, t]
    if loss_type == "grpo":
        return np.mean([per[i].sum() / max(mask[i].sum(), 1) for i in range(B)])
    if loss_type == "dr_grpo":
        return per.sum() / (B * L)
    return per.sum() / max(mask.sum(), 1)


def _tensors(dtype, B=6, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(B, T, generator=g, dtype=dtype) * 3
    old = logps + torch.randn(B, T, generator=g, dtype=dtype) * 0.3     # ratios well outside [0.8, 1.2] too
    ref = logps + torch.randn(B, T, generator=g, dtype=dtype) * 0.5
    adv = torch.randn(B, generator=g, dtype=dtype)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = (torch.arange(T)[None] < lengths[:, None]).to(torch.int64)
    return logps, old, ref, adv, mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("loss_type", losses.GRPO_LOSS_TYPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("beta, eh, correct", [(0.0, 0.2, True), (0.04, 0.28, True), (0.3, 0.2, False)])
def test_grpo_loss_matches_a_loop(dtype, loss_type, level, beta, eh, correct):
    logps, old, ref, adv, mask = _tensors(dtype)
    ours = losses.grpo_loss(logps, old, ref if beta else None, adv, mask, beta=beta, epsilon_low=0.2, epsilon_high=eh,
                            loss_type=loss_type, importance_sampling_level=level, max_completion_length=10,
                            use_bias_correction_kl=correct)
    want = _reference_loss(logps, old, ref, adv, mask, beta, 0.2, eh, loss_type, level, 10, correct)
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours.item(), want, rtol=1e-5 if dtype == torch.float32 else 1e-10)


def test_loss_is_minus_mean_advantage_at_the_first_step_but_the_gradient_is_not_zero():
    """pi / pi.detach() = 1, so the loss is -mean(A) (0 for group-normalised A) yet its gradient is -A grad log pi."""
    logps, _, _, _, mask = _tensors(torch.float64)
    mask = torch.ones_like(mask)
    adv = losses.grpo_advantages(torch.tensor([1.0, 0, 0, 1, 1, 0], dtype=torch.float64), 3)
    logps = logps.clone().requires_grad_(True)
    loss = losses.grpo_loss(logps, None, None, adv, mask, loss_type="bnpo")
    loss.backward()
    assert abs(loss.item()) < 1e-12
    torch.testing.assert_close(logps.grad, -adv[:, None].expand_as(logps) / mask.sum())


def test_grpo_loss_argument_errors():
    logps, old, ref, adv, mask = _tensors(torch.float32)
    with pytest.raises(ValueError, match="ref_logps"):
        losses.grpo_loss(logps, old, None, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="max_completion_length"):
        losses.grpo_loss(logps, old, None, adv, mask, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="loss_type"):
        losses.grpo_loss(logps, old, None, adv, mask, loss_type="ppo")


def length_reward(completions, **kwargs):
    """A test reward that differs between completions of an untrained model (so advantages are not all 0)."""
    return [len(rewards.completion_text(c)) / 10 for c in completions]


@pytest.fixture(scope="module")
def tiny_grpo(tokenizer, tmp_path_factory):
    from course_utils.data import load_jsonl
    from course_utils.modeling import build_model
    from course_utils.run_config import get_profile
    from course_utils.recipes import GRPORecipe
    from course_utils.training import grpo_trainer

    def make(**changes):
        recipe = replace(GRPORecipe(), **{"steps": 1, "max_completion_length": 12, "num_generations": 4,
                                           "prompts_per_step": 2, **changes})
        rows = grpo.grpo_rows(load_jsonl("arithmetic", "train")[:8])
        model = build_model(tokenizer, seed=0).float()
        return grpo_trainer(model, tokenizer, get_profile("cpu-tiny", seed=0), recipe, tmp_path_factory.mktemp("g"),
                            rows, [length_reward, rewards.accuracy_reward])
    return make


def test_trl_grpo_parity_on_learned_positions_and_dropout(tmp_path):
    """GPT-2 (learned positions, dropout 0.1): our log-probs number positions as TRL's GRPO does, dropout is off."""
    from course_utils.adapt import adapt
    from course_utils.data import load_jsonl
    from course_utils.modeling import family_model
    from course_utils.run_config import get_profile
    from course_utils.recipes import GRPORecipe
    from course_utils.training import grpo_trainer
    model, tokenizer = family_model("gpt2")
    adapt(model, tokenizer)
    recipe = replace(GRPORecipe(), steps=1, max_completion_length=12, num_generations=4, prompts_per_step=2)
    trainer = grpo_trainer(model, tokenizer, get_profile("cpu-tiny", seed=0), recipe, tmp_path,
                           grpo.grpo_rows(load_jsonl("arithmetic", "train")[:8]), [length_reward])
    assert trainer.args.disable_dropout
    ours, theirs = grpo.trl_parity(trainer, n_prompts=2, perturb=0.05)["logps"]
    torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("changes", [{}, {"beta": 0.0, "num_iterations": 2, "scale_rewards": "batch"},
                                     {"scale_rewards": "none", "epsilon_high": 0.28}])
def test_trl_grpo_parity_on_its_own_batch(tiny_grpo, changes):
    """TRL's advantages, per-token log-probs and loss (every loss_type, token and sequence level) equal ours."""
    trainer = tiny_grpo(**changes)
    out = grpo.trl_parity(trainer, n_prompts=2, perturb=0.05)
    assert out["rewards"].shape == (8,) and out["rewards"].std() > 0     # a real test: advantages not all 0
    keys = [k for k in out if k.startswith("loss/")]
    assert len(keys) == 8
    for key in ["advantages", "logps", *keys]:
        ours, theirs = out[key]
        torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=1e-4, atol=1e-5, msg=key)
    # the nudge moved the policy: ratios are not 1, so the loss depends on the level
    assert not torch.isclose(out["loss/grpo/token"][1], out["loss/grpo/sequence"][1])


def test_trl_drops_the_answer_column_without_remove_unused_columns_false(tiny_grpo):
    """The pitfall of notebook 07: with remove_unused_columns=True the accuracy reward gets no answers, and says so."""
    trainer = tiny_grpo()
    trainer.args.remove_unused_columns = True
    batch_rows = [{"prompt": r["prompt"]} for r in [trainer.train_dataset[0]] * trainer.num_generations]
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        trainer._generate_and_score_completions(batch_rows)


def _trl_prompt_ids(trainer, n_prompts=2):
    rows = [trainer.train_dataset[i] for i in range(n_prompts) for _ in range(trainer.num_generations)]
    prompt_ids, images, fields = trainer._tokenize_prompts([r["prompt"] for r in rows])
    return prompt_ids, images, fields


def test_course_sampler_draws_trls_own_completions(tiny_grpo, monkeypatch):
    """The course's GRPOTrainer samples (on the LoRA model, in training mode) the very completions TRL's path does."""
    from trl import GRPOTrainer

    from course_utils import engine
    trainer = tiny_grpo(temperature=1.0)
    assert type(trainer).__mro__[1] is GRPOTrainer and engine.supports_sampling(trainer.model, trainer.generation_config)
    torch.manual_seed(3)
    with torch.no_grad():                # PEFT starts B at 0: a trained adapter's delta, so the fold is tested
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    calls = []
    decode = engine.decode
    monkeypatch.setattr(engine, "decode", lambda *a, **k: calls.append(1) or decode(*a, **k))
    prompt_ids, images, fields = _trl_prompt_ids(trainer)
    runs = []
    for method in (type(trainer)._generate_single_turn, GRPOTrainer._generate_single_turn):
        torch.manual_seed(5)
        runs.append(method(trainer, prompt_ids, images, fields, trainer.num_generations)[0])
    ours, theirs = runs
    assert calls == [1]                                           # the course's sampler ran, TRL's did not call it
    assert ours == theirs
    assert len({tuple(c) for c in ours}) > 1                      # real samples, not one repeated string
    eos = set(trainer.eos_token_ids)
    for c in ours:                                                # EOS ends a completion; nothing follows it
        assert not eos & set(c[:-1])
    assert any(c and c[-1] in eos and len(c) < trainer.max_completion_length for c in ours)


def test_course_sampler_falls_back_to_trl_where_it_would_differ(tiny_grpo, monkeypatch):
    """top-k, a repetition penalty, active dropout or the env switch: TRL's own generate path is used."""
    from course_utils import engine
    trainer = tiny_grpo()
    assert engine.supports_sampling(trainer.model, trainer.generation_config)
    for field, value in (("top_k", 5), ("top_k", None), ("top_p", None), ("repetition_penalty", 1.2),
                         ("min_p", 0.1), ("do_sample", False), ("temperature", 0.0), ("num_return_sequences", 2)):
        saved = getattr(trainer.generation_config, field)
        setattr(trainer.generation_config, field, value)
        assert not engine.supports_sampling(trainer.model, trainer.generation_config), field
        setattr(trainer.generation_config, field, saved)
    config = trainer.model.get_base_model().config
    monkeypatch.setattr(config, "attention_dropout", 0.1)        # TRL samples in training mode: dropout would act
    assert not engine.supports_sampling(trainer.model, trainer.generation_config)
    monkeypatch.setattr(config, "attention_dropout", 0.0)
    monkeypatch.setenv(engine.ENV_SWITCH, "0")
    assert not engine.supports_sampling(trainer.model, trainer.generation_config)
    monkeypatch.delenv(engine.ENV_SWITCH)
    trainer.model.get_base_model().gradient_checkpointing_enable()   # generate then runs without a cache
    assert not engine.supports_sampling(trainer.model.train(), trainer.generation_config)
    trainer.model.get_base_model().gradient_checkpointing_disable()
    calls = []
    monkeypatch.setattr(engine, "decode", lambda *a, **k: calls.append(1))
    trainer.generation_config.top_k = 5
    prompt_ids, images, fields = _trl_prompt_ids(trainer, 1)
    out = trainer._generate_single_turn(prompt_ids, images, fields, trainer.num_generations)[0]
    assert not calls and len(out) == trainer.num_generations


def test_course_grpo_run_logs_what_trls_run_logs(tiny_grpo, monkeypatch):
    """Two steps with the course's sampler and two with TRL's generate, from one seed: the same log, number for number."""
    from course_utils import engine
    logs = []
    calls = []
    decode = engine.decode
    monkeypatch.setattr(engine, "decode", lambda *a, **k: calls.append(1) or decode(*a, **k))
    for switch in ("1", "0"):
        monkeypatch.setenv(engine.ENV_SWITCH, switch)
        torch.manual_seed(11)
        trainer = tiny_grpo(steps=2)
        trainer.args.logging_steps = 1
        trainer.train()
        logs.append([{k: v for k, v in h.items() if "time" not in k and "per_second" not in k}
                     for h in trainer.state.log_history])
    assert calls == [1, 1]                                        # both steps of the first run used the engine
    assert logs[0] == logs[1]
    assert logs[0][0]["completions/mean_length"] > 0


# --------------------------------------------------------------------------- what notebook 07 measures and shows
@pytest.fixture(scope="module")
def tiny_reward_model(tokenizer):
    from transformers import AutoModelForSequenceClassification

    from course_utils.modeling import build_model
    config = build_model(tokenizer, seed=0).config
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(config.__class__(**{**config.to_dict(), "num_labels": 1}))


def test_reward_model_scorer_scores_each_answer_as_evaluate_and_keeps_them(tokenizer, tiny_reward_model):
    from course_utils import experiment
    from course_utils.evaluation import RewardModelScorer, score_completions
    questions = ["What is 2 + 3?", "What is 10 + 7?", "What is 4 + 4?"]
    texts = ["<think>2 + 3 = 5</think><answer>5</answer>", "<answer>18</answer>", "no tags at all"]
    scorer = RewardModelScorer(tiny_reward_model, tokenizer)
    assert scorer.last is None
    scores = scorer(questions, texts)
    assert isinstance(scores, list) and len(scores) == 3 and len(set(scores)) == 3       # three different answers
    want = score_completions(tiny_reward_model, tokenizer, questions, texts)
    torch.testing.assert_close(scorer.last, want, rtol=0, atol=0)                        # kept, one per answer
    assert scores == want.tolist()
    assert scorer(questions[::-1], texts[::-1]) == pytest.approx(scores[::-1], abs=1e-6)  # pairs travel together
    assert scorer.last.tolist() == pytest.approx(scores[::-1], abs=1e-6)                 # the latest call's
    assert "scorer" in experiment.evaluate.__code__.co_varnames                           # the argument it serves


def test_top_scored_wrong_ranks_only_wrong_answers_best_first():
    samples = [{"completion": c, "correct": ok} for c, ok in
               (("a", False), ("b", True), ("c", False), ("d", False), ("e", True), ("f", False))]
    scores = torch.tensor([0.5, 9.0, 2.0, -1.0, 8.0, 2.0])
    top = evaluation.top_scored_wrong(samples, scores, k=3)
    assert [s["completion"] for _, s in top] == ["c", "f", "a"]      # the right answers (9, 8) never; ties in order
    assert [score for score, _ in top] == [2.0, 2.0, 0.5] and all(isinstance(x, float) for x, _ in top)
    assert len(evaluation.top_scored_wrong(samples, scores, k=10)) == 4
    with pytest.raises(ValueError, match="6 samples but 5 scores"):
        evaluation.top_scored_wrong(samples, scores[:5])




def test_methods_table_reads_other_notebooks_results_and_says_what_is_missing():
    before = {"accuracy": 0.353, "pass_at_1": 0.172}
    after = {"accuracy": 0.57, "pass_at_1": 0.315, "seconds": 120.4}
    memory = {"PPO": 21.2, "DPO": 14.1, "GRPO": 9.3}
    ppo = {"metrics": {"accuracy": {"before": 0.353, "after": 0.643}, "pass_at_1": {"before": 0.233, "after": 0.5}},
           "extra": {"verifier_seconds": 88.0}, "peak_ram_mb": 1500.0}
    table = grpo.methods_table({"05_ppo": ppo}, before, after, memory, peak_ram_mb=1700.4).splitlines()
    assert len(table) == 5 and table[0].startswith("| method | models in memory |")
    assert table[2] == ("| PPO (05, verifier) | policy, critic, reference (+ reward model or verifier) | 21.2 | "
                        "35.3% → 64.3% | 23.3% → 50.0% | 88 | 1500 |")
    assert "06_dpo's results are missing" in table[3] and "| 14.1 |" in table[3]
    assert table[4] == ("| GRPO (07, section 5) | policy with LoRA (reference = adapter off) | 9.3 | 35.3% → 57.0% | "
                        "17.2% → 31.5% | 120 | 1700 (so far) |")
    dpo = {"metrics": {"accuracy": {"before": 0.353, "after": 0.533}}, "peak_ram_mb": 1400.0,
           "extra": {"runs": {"(b) self-generated pairs": {"seconds": 61.0}}}}
    row = grpo.methods_table({"06_dpo": dpo}, before, after, memory, 1.0).splitlines()[3]
    assert row == "| DPO (06, self-generated pairs) | policy, reference | 14.1 | 35.3% → 53.3% | – | 61 | 1400 |"


def _reference_is_weight(trainer, sampler, mask, mode, low, high):
    """TRL 1.15's rule for the sampler's importance weight, in float64 NumPy, one completion at a time."""
    trainer, sampler, mask = (np.asarray(x, dtype=np.float64) for x in (trainer, sampler, mask))
    diff = np.nan_to_num((trainer - sampler) * mask, nan=0.0)
    w = np.exp(diff.sum(-1, keepdims=True)) if mode.startswith("sequence") else np.exp(diff)
    low, high = (-np.inf if low is None else low), (np.inf if high is None else high)
    return np.clip(w, low, high) if mode.endswith("truncate") else np.where((w < low) | (w > high), 0.0, w)


@pytest.mark.parametrize("mode", losses.SAMPLER_IS_MODES)
@pytest.mark.parametrize("low, high", [(None, 3.0), (0.5, 2.0), (0.8, None)])
def test_sampler_is_weight_follows_trls_rule(mode, low, high):
    logps, old, _, _, mask = _tensors(torch.float64)
    sampler = old.clone()
    sampler[0, 1] = float("nan")                       # a log-prob the sampler did not return: no correction there
    ours = losses.sampler_is_weight(old, sampler, mask, mode, low, high)
    want = _reference_is_weight(old, sampler, mask, mode, low, high)
    np.testing.assert_allclose(ours.numpy(), want, rtol=1e-12)
    assert ours.shape == ((6, 1) if mode.startswith("sequence") else (6, 7))
    same = losses.sampler_is_weight(old, old, mask, mode, low, high)      # sampler == trainer: the weight is 1
    assert torch.all(same == 1) or (low is not None and low > 1)


def test_sampler_is_weight_drops_or_bounds_a_rare_token():
    old = torch.zeros(2, 3)
    sampler = torch.tensor([[0.0, -4.0, 0.0], [0.0, 0.0, 0.0]])     # the sampler found token 1 of row 0 e^4 x rarer
    mask = torch.ones(2, 3)
    assert losses.sampler_is_weight(old, sampler, mask, "token_truncate")[0, 1] == 3.0
    assert losses.sampler_is_weight(old, sampler, mask, "token_mask")[0, 1] == 0.0
    assert losses.sampler_is_weight(old, sampler, mask, "sequence_mask").flatten().tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="mode"):
        losses.sampler_is_weight(old, sampler, mask, "tokens")


@pytest.mark.parametrize("mode", losses.SAMPLER_IS_MODES)
def test_weighted_grpo_loss_matches_trls_vllm_correction_path(tiny_grpo, mode):
    """The same weight in our loss and in TRL's _compute_loss (its vLLM correction branch): the same loss."""
    trainer = tiny_grpo()
    flags = (trainer.use_vllm, trainer.vllm_importance_sampling_correction)
    out = grpo.trl_parity(trainer, n_prompts=2, perturb=0.05, sampler_noise=0.5, is_mode=mode, is_clip_min=0.5,
                          is_clip_max=2.0, levels=("token",))
    weight = out["is_weight"]
    assert ((weight > 0) & (weight != 1)).any()          # a real test: the weight is neither all 1 nor all dropped
    for key in [k for k in out if k.startswith("loss/")]:
        ours, theirs = out[key]
        torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=1e-4, atol=1e-5, msg=key)
    assert (trainer.use_vllm, trainer.vllm_importance_sampling_correction) == flags     # restored
    plain = grpo.trl_parity(trainer, n_prompts=2, perturb=0.05, levels=("token",))
    assert "is_weight" not in plain
