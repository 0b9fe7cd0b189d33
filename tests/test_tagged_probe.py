"""Tests of course_utils.probes' tagged-prompt probe (notebook 01)."""
from types import SimpleNamespace

import pytest

from course_utils import probes


@pytest.mark.parametrize("continuation, expected", [
    ("3 + 5 = 8, so 8</think><answer>8</answer> and more text<answer>9</answer>",
     "<think>3 + 5 = 8, so 8</think><answer>8</answer>"),                      # cut at the first </answer>
    ("3 + 5 = 8 and it never closes", "<think>3 + 5 = 8 and it never closes"),  # no </answer>: kept whole
    ("</answer>", "<think></answer>"),
])
def test_cut_at_answer(continuation, expected):
    assert probes.cut_at_answer(continuation) == expected


def test_the_probe_scores_format_and_answer_per_sample_in_problem_order(monkeypatch):
    problems = [{"question": "What is 1 plus 2?", "answer": "3"}, {"question": "What is 2 plus 2?", "answer": "4"}]
    continuations = ["1 + 2 = 3</think><answer>3</answer> junk",   # problem 1: strict format, right
                     "1 + 2 = 3</think> The answer is <answer>3</answer>",   # right answer, loose format
                     "2 + 2 = 5</think><answer>5</answer>",        # problem 2: strict format, wrong
                     "no tags at all"]                              # neither
    seen = {}

    def fake_sample(model, tokenizer, prompts, num_samples, temperature, max_new_tokens):
        seen.update(prompts=prompts, num_samples=num_samples, temperature=temperature, budget=max_new_tokens)
        return SimpleNamespace(texts=continuations)

    monkeypatch.setattr(probes.generation, "sample_completions", fake_sample)
    probe = probes.tagged_prompt_probe(None, None, problems, num_samples=2, temperature=1.0, max_new_tokens=48)
    assert seen == {"prompts": ["What is 1 plus 2? <think>", "What is 2 plus 2? <think>"], "num_samples": 2,
                    "temperature": 1.0, "budget": 48}
    assert probe.n == 4 and probe.format_rate == 0.5 and probe.accuracy == 0.5
    assert probe.texts[0] == "<think>1 + 2 = 3</think><answer>3</answer>" and probe.texts[3] == "<think>no tags at all"
