"""The R1 pipeline's helpers (notebook 08): prompts, non-reasoning data, rejection sampling."""
import math

import pytest

from course_utils import data, evaluation, r1


def test_zero_prompts_end_inside_the_think_block():
    q = "What is 23 plus 45?"
    assert r1.zero_prompt(q) == f"{q} <think>"
    paper = r1.zero_prompt(q, "r1")
    assert paper.startswith(r1.R1_ZERO_SYSTEM) and paper.endswith(f"User: {q} Assistant: <think>")
    assert r1.zero_prompt(q, "instruction") == f"{r1.INSTRUCTION} User: {q} Assistant: <think>"
    with pytest.raises(ValueError, match="unknown template"):
        r1.zero_prompt(q, "chat")
    rows = r1.zero_rows([{"question": q, "answer": 68}])
    assert rows == [{"prompt": f"{q} <think>", "answer": "68"}]


def test_everyday_sentences_are_the_story_register():
    train, val = data.everyday_sentences("train"), data.everyday_sentences("validation")
    assert len(train) > 4000 and len(val) > 200
    assert not any(ch.isdigit() or ch == "<" for s in train + val for ch in s)
    assert set(val) - set(train)    # held-out sentences exist that training never saw
    row = data.everyday_chat("The blue cat sat near the market.")
    assert row["messages"][0]["content"] == "Tell me about the cat."
    assert data.everyday_chat("Milo likes rice.")["messages"][0]["content"] == "Tell me about Milo."
    rows = data.everyday_rows(5, seed=0)
    assert len(rows) == 5 and rows == data.everyday_rows(5, seed=0) and rows != data.everyday_rows(5, seed=1)
    with pytest.raises(ValueError, match="n must be in"):
        data.everyday_rows(10 ** 6, seed=0)


def test_everyday_loss_is_a_finite_loss(tokenizer):
    from course_utils.modeling import build_model
    loss = evaluation.everyday_loss(build_model(tokenizer, seed=0).float(), tokenizer)
    assert math.isfinite(loss) and loss > math.log(2)   # an untrained model is far from perfect


def _fake_sampler(texts, expect_num_samples, expect_prompt_end=None):
    from course_utils.generation import Completions

    def fake_sample(model, tok, prompts, num_samples, **kwargs):
        assert num_samples == expect_num_samples
        if expect_prompt_end is not None:
            assert all(p.endswith(expect_prompt_end) for p in prompts)
        return Completions(texts=texts, prompt_ids=None, prompt_mask=None, completion_ids=None,
                           completion_mask=None, logps=None, num_samples=num_samples)
    return fake_sample


PROBLEMS = [{"question": "2 + 3?", "answer": "5"}, {"question": "3 + 4?", "answer": "7"},
            {"question": "1 + 1?", "answer": "2"}]


def test_rejection_sample_keeps_verified_readable_answers_one_per_problem(tokenizer, monkeypatch):
    texts = ["<think>2 + 3 = 5, so 5</think><answer>5</answer>",      # problem 1: right, in steps
             "<think>2 + 3 = 6, so 6</think><answer>6</answer>",      #            wrong
             "<think>the park, so 7</think><answer>7</answer>",        # problem 2: right but prose: filtered
             "<think>3 + 4 = 7, so 7</think><answer>7</answer> x",    #            right, extra text: not exact format
             "<think>1 + 1 = 3, so 3</think><answer>3</answer>",      # problem 3: both wrong
             "<think>1 + 1 = 4, so 4</think><answer>4</answer>"]
    monkeypatch.setattr(r1, "sample_completions", _fake_sampler(texts, 2))
    rows, stats = r1.rejection_sample(None, tokenizer, PROBLEMS, num_samples=2)
    assert rows == [{"messages": data.to_messages("2 + 3?", texts[0])}]
    assert stats == {"problems": 3, "samples": 6, "sample_accuracy": 3 / 6, "kept": 1, "several_kept": 0,
                     "with_choice": 0, "rm_changed": 0, "wrong_steps": 0}
    rows, stats = r1.rejection_sample(None, tokenizer, PROBLEMS, num_samples=2, require_steps=False)
    assert [r["messages"][1]["content"] for r in rows] == [texts[0], texts[2]]


def test_rejection_sample_from_r1_zero_puts_the_tag_back(tokenizer, monkeypatch):
    texts = ["2 + 3 = 5, so 5</think><answer>5</answer>", "3 + 4 = 7, so 8</think><answer>8</answer>",
             "1 + 1 = 2, so 2</think><answer>2</answer>"]
    monkeypatch.setattr(r1, "sample_completions", _fake_sampler(texts, 1, expect_prompt_end=" <think>"))
    rows, stats = r1.rejection_sample(None, tokenizer, PROBLEMS, num_samples=1, template="corpus")
    assert [r["messages"][1]["content"] for r in rows] == ["<think>" + texts[0], "<think>" + texts[2]]
    assert stats["kept"] == 2 and stats["sample_accuracy"] == pytest.approx(2 / 3)


def test_rejection_sample_counts_right_answers_with_wrong_steps(tokenizer, monkeypatch):
    problems = [{"question": "What is 23 plus 45?", "answer": "68",
                 "completion": "<think>3 + 5 = 8, 2 + 4 + 0 = 6, so 68</think><answer>68</answer>"}] * 2
    texts = ["<think>3 + 5 = 8, 2 + 4 + 0 = 6, so 68</think><answer>68</answer>",   # the true working
             "<think>4 + 4 = 8, 1 + 5 + 0 = 6, so 68</think><answer>68</answer>"]   # right answer, wrong steps
    monkeypatch.setattr(r1, "sample_completions", _fake_sampler(texts, 1))
    rows, stats = r1.rejection_sample(None, tokenizer, problems, num_samples=1)
    assert stats["kept"] == 2 and stats["wrong_steps"] == 1


def test_rejection_sample_lets_the_reward_model_break_ties(tokenizer, monkeypatch):
    import torch
    texts = ["<think>2 + 3 = 5, so 5</think><answer>5</answer>", "<think>3 + 2 = 5, so 5</think><answer>5</answer>"]
    monkeypatch.setattr(r1, "sample_completions", _fake_sampler(texts, 2))
    monkeypatch.setattr(r1, "score_completions", lambda rm, tok, q, c: torch.tensor([0.1, 0.9]))
    rows, stats = r1.rejection_sample(None, tokenizer, PROBLEMS[:1], num_samples=2, reward_model=object(),
                                      rm_tokenizer=tokenizer)
    assert rows[0]["messages"][1]["content"] == texts[1]
    assert stats["several_kept"] == stats["with_choice"] == stats["rm_changed"] == 1
    with pytest.raises(ValueError, match="together"):
        r1.rejection_sample(None, tokenizer, PROBLEMS, reward_model=object())
    with pytest.raises(ValueError, match="at least 1"):
        r1.rejection_sample(None, tokenizer, PROBLEMS, num_samples=0)


def test_zero_evaluate_scores_answers_with_their_opening_tag(tokenizer, monkeypatch):
    answers = ["2 + 3 = 5, so 5</think><answer>5</answer>", "junk"]
    monkeypatch.setattr(r1, "generate", lambda model, tok, prompts, max_new_tokens: answers[:len(prompts)])
    out = r1.zero_evaluate(None, tokenizer, PROBLEMS[:2])
    assert out["texts"] == ["<think>" + a for a in answers]
    assert out["accuracy"] == 0.5 and out["format_rate"] == 0.5 and out["step_language"] == 0.5
    monkeypatch.setattr(r1, "sample_completions", _fake_sampler(answers * 2, 2))
    out = r1.zero_evaluate(None, tokenizer, PROBLEMS[:2], num_samples=2)
    assert len(out["texts"]) == 4 and out["accuracy"] == 0.25   # answers are matched to their own problem


def test_evaluate_stage_on_r1_zero_prompts_uses_the_profiles_budget(tokenizer, monkeypatch):
    from types import SimpleNamespace
    profile = SimpleNamespace(eval_size=200, max_new_tokens=7)
    problems = evaluation.heldout_problems("test", 200)
    answer_of = {r1.zero_prompt(p["question"]): p["answer"] for p in problems}
    budgets = []

    def fake_generate(model, tok, prompts, max_new_tokens):   # right and in steps, then a wrong answer in prose
        budgets.append(max_new_tokens)
        return [f"so {answer_of[q]}</think><answer>{answer_of[q]}</answer>" if i < 100
                else "the park</think><answer>0</answer>" for i, q in enumerate(prompts)]

    def fake_sample(model, tok, prompts, num_samples, max_new_tokens, **kwargs):   # every sample right
        budgets.append(max_new_tokens)
        return _fake_sampler([f"so {answer_of[q]}</think><answer>{answer_of[q]}</answer>" for q in prompts],
                             1)(model, tok, prompts, num_samples)

    monkeypatch.setattr(r1, "generate", fake_generate)
    monkeypatch.setattr(r1, "sample_completions", fake_sample)
    monkeypatch.setattr(r1, "everyday_loss", lambda model, tok: 1.25)
    ev, figures = r1.evaluate_stage(None, tokenizer, profile, template="corpus")
    assert budgets == [7, 7]
    assert (ev.n, ev.accuracy, ev.format_rate, ev.pass_at_1, ev.k) == (200, 0.5, 1.0, 1.0, 1)
    assert ev.correct == (True,) * 100 + (False,) * 100 and ev.failures["correct"] == 0.5
    assert ev.stderr == pytest.approx(math.sqrt(0.25 / 200))
    # length and step language count the answers with the opening tag the prompt ends in
    texts = [s["completion"] for s in ev.samples]
    assert texts[0].startswith("<think>so ") and texts[-1] == "<think>the park</think><answer>0</answer>"
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert ev.mean_tokens == pytest.approx(sum(lengths) / 200)
    assert figures == {"step_language": 0.5, "everyday_loss": 1.25}


def test_add_stage_logs_the_chat_templates_evaluation_with_its_seconds(tokenizer, monkeypatch):
    from course_utils import experiment
    samples = ({"question": "2 + 3?", "completion": "<think>2 + 3 = 5, so 5</think><answer>5</answer>",
                "answer": "5", "correct": True},
               {"question": "3 + 4?", "completion": "<answer>8</answer>", "answer": "7", "correct": False})
    calls = []

    def fake_evaluate(model, tok, profile, **kwargs):
        calls.append(kwargs)
        return experiment.Eval(accuracy=0.5, format_rate=0.5, n=2, stderr=0.35, failures={}, mean_tokens=9.0,
                               pass_at_1=0.25, pass_at_k=0.25, k=1, temperature=1.0, correct=(True, False),
                               samples=samples)

    monkeypatch.setattr(experiment, "evaluate", fake_evaluate)
    monkeypatch.setattr(r1, "everyday_loss", lambda model, tok: 2.0)
    runs = experiment.Runs()
    with runs.timed("stage"):
        pass
    row = r1.add_stage(runs, "stage", None, tokenizer, profile=None)
    assert calls == [{"k": 1, "keep_samples": True}]   # pass@1 from one sample per problem, samples for the figures
    assert row is runs["stage"] and row["accuracy"] == 0.5 and row["pass_at_1"] == 0.25
    assert row["step_language"] == 0.5 and row["everyday_loss"] == 2.0 and row["seconds"] >= 0
    assert set(r1.STAGE_COLUMNS) <= set(row)   # every column of the stage tables is filled
    assert "| stage | 50.0% | 25.0% |" in runs.table(r1.STAGE_COLUMNS)
