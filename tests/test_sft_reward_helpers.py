"""Helpers behind notebooks 02 and 03: chat views of the data, corrupted copies, reward scoring, recipes."""
import pytest
import torch
from transformers import AutoModelForSequenceClassification

from course_utils import data, evaluation, modeling, recipes, training
from course_utils.run_config import get_profile
from course_utils.rewards import is_correct, is_well_formatted


def test_column_steps_and_completion():
    assert data.column_steps(29, 46) == "9 + 6 = 15, 2 + 4 + 1 = 7"
    assert data.format_completion(29, 46) == "<think>9 + 6 = 15, 2 + 4 + 1 = 7, so 75</think><answer>75</answer>"
    assert data.format_completion(99, 99).endswith("<answer>198</answer>")
    assert is_correct(data.format_completion(12, 39), "51")


def test_chat_views():
    row = data.sft_rows("test", n=1)[0]
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
    pref = data.preference_rows("test", n=2)
    assert set(pref[0]) == {"prompt", "chosen", "rejected"} and pref[0]["prompt"][0]["role"] == "user"


def test_corrupt_answers_is_seeded_and_bounded():
    problems = data.load_jsonl("arithmetic", "train", n=1000)
    noisy = data.corrupt_answers(problems, 0.3, seed=0)
    wrong = sum(not is_correct(n["completion"], p["answer"]) for n, p in zip(noisy, problems))
    assert 200 < wrong < 400 and noisy == data.corrupt_answers(problems, 0.3, seed=0)
    assert all(is_well_formatted(n["completion"]) for n in noisy)
    with pytest.raises(ValueError):
        data.corrupt_answers(problems, 1.5, seed=0)


def test_forget_carry_only_touches_two_templates_and_only_carries():
    problems = data.load_jsonl("arithmetic", "train")
    careless = data.forget_carry(problems)
    for p, c in zip(problems, careless):
        affected = p["question"].startswith(("What is", "Add "))
        has_carry = p["a"] % 10 + p["b"] % 10 >= 10
        assert is_correct(c["completion"], p["answer"]) == (not (affected and has_carry))


@pytest.fixture(scope="module")
def tiny_pair(tokenizer):
    lm = modeling.build_model(tokenizer, seed=0)
    return lm, tokenizer


def test_score_completions_matches_manual_last_token(tiny_pair, tmp_path):
    lm, tok = tiny_pair
    path = modeling.save_checkpoint(lm, tok, tmp_path / "lm")
    rm = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    scores = evaluation.score_completions(rm, tok, ["Add 10 and 20.", "What is 12 plus 39?"],
                                          ["30", data.format_completion(12, 39)], batch_size=1)
    batched = evaluation.score_completions(rm, tok, ["Add 10 and 20.", "What is 12 plus 39?"],
                                           ["30", data.format_completion(12, 39)], batch_size=2)
    torch.testing.assert_close(scores, batched, atol=1e-5, rtol=1e-5)  # padding does not change a score
    rows = data.load_jsonl("preferences", "test", n=8)
    res = evaluation.pair_accuracy(rm, tok, rows)
    manual = evaluation.score_completions(rm, tok, [r["prompt"] for r in rows], [r["chosen"] for r in rows])
    torch.testing.assert_close(res["chosen"], manual)
    assert res["accuracy"] == float((res["chosen"] > res["rejected"]).float().mean()) and res["chosen"].shape == (8,)
    swapped = evaluation.pair_accuracy(rm, tok, [dict(r, chosen=r["rejected"], rejected=r["chosen"]) for r in rows])
    assert swapped["accuracy"] == pytest.approx(1 - res["accuracy"])  # no ties between different texts
    with pytest.raises(ValueError):
        evaluation.score_completions(rm, tok, ["a"], [])


def test_continuation_logprob_and_per_token_losses(tiny_pair):
    lm, tok = tiny_pair
    lp = evaluation.continuation_logprob(lm, tok, "Anna likes", " tea")
    ids = tok("Anna likes tea", return_tensors="pt")["input_ids"]
    n_prefix = len(tok("Anna likes")["input_ids"])
    logp_all = torch.log_softmax(lm(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    assert lp == pytest.approx(float(logp_all[n_prefix - 1:].sum().detach()), abs=1e-4)
    toks, losses, mask = evaluation.per_token_losses(lm, tok, data.to_messages("Add 10 and 20.", "30"))
    assert len(toks) == len(losses) == len(mask) and sum(mask) > 0 and losses[0] == 0.0
    enc = tok.apply_chat_template(data.to_messages("Add 10 and 20.", "30"), tokenize=True, return_dict=True)
    ids = torch.tensor([enc["input_ids"]])
    manual = -torch.log_softmax(lm(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(losses[1:]), manual.detach(), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        evaluation.continuation_logprob(lm, tok, "Anna", "")


def test_sft_recipe_trains_and_callback_records(tiny_pair, tmp_path):
    lm, tok = tiny_pair
    before = [p.detach().clone() for p in lm.parameters()]
    trainer = training.sft_trainer(lm, tok, get_profile("cpu-tiny"), recipes.SFTRecipe(steps=4), tmp_path,
                                   train_rows=data.sft_rows(n=64), logging_steps=2)
    curve = training.AccuracyCallback(tok, every=2, n=200, max_new_tokens=2)
    trainer.add_callback(curve)
    trainer.train()
    assert [s for s, _ in curve.curve] == [0, 2, 4]
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.parameters()))


def test_a_criterion_stops_training_and_a_missed_one_fails_loudly(tiny_pair, tmp_path):
    lm, tok = tiny_pair
    values = iter([0.0, 0.2, 0.95, 0.99])
    reached = training.CriterionCallback(lambda model: next(values), every=2, stop_at=0.9, name="copying")
    trainer = training.sft_trainer(lm, tok, get_profile("cpu-tiny"), recipes.SFTRecipe(steps=8), tmp_path,
                                   train_rows=data.sft_rows(n=64), logging_steps=2)
    trainer.add_callback(reached)
    trainer.train()
    assert reached.curve == [(0, 0.0), (2, 0.2), (4, 0.95)] and trainer.state.global_step == 4
    assert reached.require("GRPO needs it") == 4
    missed = training.CriterionCallback(lambda model: 0.3, every=2, stop_at=0.9, name="copying")
    trainer = training.sft_trainer(lm, tok, get_profile("cpu-tiny"), recipes.SFTRecipe(steps=4), tmp_path,
                                   train_rows=data.sft_rows(n=64), logging_steps=2)
    trainer.add_callback(missed)
    trainer.train()
    with pytest.raises(RuntimeError, match="copying did not reach 90% within the step cap.*GRPO needs it"):
        missed.require("GRPO needs it")


def test_reward_recipe_trains(tiny_pair, tmp_path):
    lm, tok = tiny_pair
    path = modeling.save_checkpoint(lm, tok, tmp_path / "lm")
    rm = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    head = rm.score.weight.detach().clone()
    training.reward_trainer(rm, tok, get_profile("cpu-tiny"), recipes.RewardRecipe(steps=3), tmp_path / "rm",
                            train_rows=data.preference_rows(n=64)).train()
    assert not torch.equal(head, rm.score.weight)


def test_hub_rows_reads_chat_and_preference_sets(tmp_path):
    import json
    user = {"role": "user", "content": "Add 10 and 20."}
    chats = tmp_path / "chats"
    chats.mkdir()
    (chats / "train.jsonl").write_text(json.dumps({"messages": [user, {"role": "assistant", "content": "30"}],
                                                   "source": "x"}) + "\n", encoding="utf-8")
    assert training.hub_rows(str(chats), "chat") == [{"messages": [user, {"role": "assistant", "content": "30"}]}]
    prefs = tmp_path / "prefs"
    prefs.mkdir()
    implicit = {"chosen": [user, {"role": "assistant", "content": "30"}],
                "rejected": [user, {"role": "assistant", "content": "31"}], "score": 1.0}
    (prefs / "train.jsonl").write_text(json.dumps(implicit) + "\n", encoding="utf-8")
    row, = training.hub_rows(str(prefs), "preference")
    assert row == {"prompt": [user], "chosen": [{"role": "assistant", "content": "30"}],
                   "rejected": [{"role": "assistant", "content": "31"}]}
    with pytest.raises(ValueError):
        training.hub_rows(str(prefs), "pairs")


def test_log_every_keeps_a_short_run_logging():
    from course_utils.training import log_every
    assert log_every(10, 450) == 10 and log_every(5, 150) == 5     # the course's full-scale runs: unchanged
    assert log_every(10, 3) == 1 and log_every(5, 2) == 1 and log_every(25, 1) == 1   # smoke runs log every step
    assert log_every(10, 8) == 4                                    # at least twice in a short run


def test_timed_curve_measures_every_few_steps_and_leaves_its_own_time_out(monkeypatch):
    import time
    from types import SimpleNamespace

    from course_utils.training import TimedCurveCallback
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def measure(model):
        now[0] += 5.0                      # a measurement takes 5 s: not training time
        return 0.5
    curve = TimedCurveCallback(every=3, measure=measure)
    curve.on_train_begin(None, None, None)
    for step in range(1, 8):
        now[0] += 1.5                      # one step
        curve.on_step_end(None, SimpleNamespace(global_step=step), None)
    curve.on_train_end(None, SimpleNamespace(global_step=7), None)
    assert [(round(t, 1), s) for t, s, _ in curve.curve] == [(0.0, 0), (4.5, 3), (9.0, 6), (10.5, 7)]
    assert curve.seconds_trained == 10.5
    with pytest.raises(ValueError, match=">= 1"):
        TimedCurveCallback(every=0, measure=measure)
