"""Stale rollouts (notebook 07, section 8): the weight history, the stale trainer, TRL's correction on its tensors."""
from dataclasses import replace

import pytest
import torch

from course_utils import grpo, losses, rewards, stale_rollouts


def length_reward(completions, **kwargs):
    """Differs between completions of an untrained model, so advantages are not all 0."""
    return [len(rewards.completion_text(c)) / 10 for c in completions]


@pytest.fixture(scope="module")
def make_trainer(tokenizer, tmp_path_factory):
    from course_utils.data import load_jsonl
    from course_utils.modeling import build_model
    from course_utils.run_config import get_profile
    from course_utils.recipes import GRPORecipe

    def make(lag, correct=False, mode="sequence_mask", clip_min=None, clip_max=3.0, plain=False, **changes):
        recipe = replace(GRPORecipe(), **{"steps": 2, "max_completion_length": 12, "num_generations": 4,
                                           "prompts_per_step": 2, "learning_rate": 5e-3, **changes})
        rows = grpo.grpo_rows(load_jsonl("arithmetic", "train")[:8])
        model = build_model(tokenizer, seed=0).float()
        args = (model, tokenizer, get_profile("cpu-tiny", seed=0), recipe, tmp_path_factory.mktemp("s"), rows,
                [length_reward])
        if plain:
            from course_utils.training import grpo_trainer
            trainer = grpo_trainer(*args)
        else:
            trainer = stale_rollouts.stale_grpo_trainer(*args, lag=lag, correct=correct, mode=mode,
                                                        clip_min=clip_min, clip_max=clip_max)
        trainer.args.logging_steps = 1
        return trainer
    return make


def test_weight_history_keeps_copies_and_puts_the_models_weights_back():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].weight.requires_grad_(False)
    history = stale_rollouts.WeightHistory(model, keep=2)
    assert set(history.params) == {"0.weight", "0.bias", "1.bias"}       # only what trains is copied
    first = history.push()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    history.push()
    history.push()
    assert len(history) == 2 and not torch.equal(history[0]["0.weight"], first["0.weight"])   # the oldest left
    now = model[0].weight.detach().clone()
    with history.use(first):
        torch.testing.assert_close(model[0].weight, first["0.weight"])
    torch.testing.assert_close(model[0].weight, now)
    with pytest.raises(ValueError, match="keep"):
        stale_rollouts.WeightHistory(model, keep=0)


def test_lag_0_without_correction_is_the_ordinary_trainer(make_trainer):
    logs = []
    for plain in (True, False):
        torch.manual_seed(3)
        trainer = make_trainer(lag=0, plain=plain)
        trainer.train()
        logs.append([{k: v for k, v in h.items() if "time" not in k and "per_second" not in k
                      and not k.startswith("stale/")} for h in trainer.state.log_history])
        if not plain:
            assert [h["stale/logp_diff"] for h in trainer.state.log_history if "stale/logp_diff" in h] == [0.0, 0.0]
    assert logs[0] == logs[1]


def test_a_lagging_sampler_draws_with_old_weights(make_trainer):
    torch.manual_seed(3)
    trainer = make_trainer(lag=1, steps=3)
    trainer.train()
    diffs = [h["stale/logp_diff"] for h in trainer.state.log_history if "stale/logp_diff" in h]
    assert diffs[0] == 0.0 and all(d > 0 for d in diffs[1:])   # step 1 samples with the start, as it trains it
    clip = [h["clip_ratio/region_mean"] for h in trainer.state.log_history if "clip_ratio/region_mean" in h]
    assert clip == [0.0] * 3          # PPO's ratio pi_theta / pi_old is 1 at every step: its clip never sees the lag
    with pytest.raises(ValueError, match="lag"):
        trainer.configure_staleness(-1, False)


@pytest.mark.parametrize("mode,clip_min,clip_max", [("sequence_mask", None, 3.0), ("sequence_truncate", None, 2.0),
                                                    ("token_mask", 0.5, 1.5), ("token_truncate", 0.5, 1.05)])
def test_trls_correction_weight_is_sampler_is_weight_on_the_same_tensors(make_trainer, mode, clip_min, clip_max):
    """TRL's own _generate_and_score_completions computes the weight; ours from its pi_old and the sampler's logps."""
    torch.manual_seed(3)
    trainer = make_trainer(lag=1, correct=True, mode=mode, clip_min=clip_min, clip_max=clip_max, steps=1)
    trainer.train()                                  # one step: the sampler (one step behind) and the trainer differ
    batch, _ = grpo.trl_generation_batch(trainer, n_prompts=2)
    theirs = batch["importance_sampling_ratio"]
    ours = losses.sampler_is_weight(batch["old_per_token_logps"], trainer.last_sampling_logps,
                                    batch["completion_mask"], mode, clip_min, clip_max)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert (theirs != 1).any()                       # a real test: the weight is not all 1
    log_ratio = (batch["old_per_token_logps"] - trainer.last_sampling_logps) * batch["completion_mask"]
    assert log_ratio.abs().max() > 1e-3


def test_log_ratios_by_lag_measures_the_gap_that_grows_with_the_lag(make_trainer):
    torch.manual_seed(3)
    trainer = make_trainer(lag=0, plain=True, steps=3)
    history = stale_rollouts.WeightHistory(trainer.model, keep=4)
    history.push()
    trainer.add_callback(history.callback())
    trainer.train()
    assert len(history) == 4
    final = history.snapshot()
    out = stale_rollouts.log_ratios_by_lag(trainer, history, (0, 3), n_prompts=2)
    assert set(out) == {"k = 0", "k = 3", "bf16 copy"}
    assert out["k = 0"].abs().max() < 1e-5                 # the same weights: ratio 1
    assert out["k = 3"].abs().mean() > 1e-3 and out["bf16 copy"].abs().max() > 0
    mid = stale_rollouts.log_ratios_by_lag(trainer, history, (1,), at=2, n_prompts=2, low_precision=None)
    assert set(mid) == {"k = 1"} and mid["k = 1"].abs().mean() > 0
    for name, p in history.params.items():                # the model has its own weights again
        torch.testing.assert_close(p.detach(), final[name])
    with pytest.raises(ValueError, match="earlier copies"):
        stale_rollouts.log_ratios_by_lag(trainer, history, (4,))
    with pytest.raises(ValueError, match="earlier copies"):
        stale_rollouts.log_ratios_by_lag(trainer, history, (1,), at=0)


def test_ratio_table_and_plot_report_each_samplers_gap():
    import math

    import matplotlib.pyplot as plt

    from course_utils import plotting
    log_ratios = {"k = 0": torch.zeros(4), "k = 8": torch.tensor([0.0, 0.1, -0.5, math.log(1.3)])}
    table = stale_rollouts.ratio_table(log_ratios, 0.2, 0.2)
    rows = table.splitlines()
    assert rows[0].startswith("| sampler | tokens |") and len(rows) == 4
    assert rows[2].endswith("| 0.0% |") and rows[3].endswith("| 50.0% |")     # -0.5 and log 1.3 lie outside
    fig, ax = plotting.plot_log_ratios(log_ratios, title="t")
    assert len(ax.patches) == 2 and [t.get_text() for t in ax.get_legend().get_texts()] == list(log_ratios)
    assert sorted(line.get_xdata()[0] for line in ax.get_lines()) == pytest.approx([math.log(0.8), math.log(1.2)])
    plt.close(fig)
