"""The probes of notebooks 02 (what SFT takes from its data) and 03 (a reward model's blind spots)."""
import pytest
import torch

from course_utils import data, evaluation, modeling, probes
from course_utils.rewards import extract_answer, extract_think, is_correct, is_well_formatted


def test_food_standing_ranks_and_measures_the_margin_against_the_best_other_food():
    logprobs = {"tea": -3.0, "plums": -1.5, "rice": -2.0, "soup": -9.0}
    assert probes.food_standing(logprobs, "plums") == {"logp": -1.5, "rank": 1, "margin": 0.5, "rival": "rice"}
    assert probes.food_standing(logprobs, "tea") == {"logp": -3.0, "rank": 3, "margin": -1.5, "rival": "plums"}
    assert probes.food_standing(logprobs, "soup")["rank"] == 4


def test_food_logprobs_scores_every_food_as_a_continuation(tokenizer):
    model = modeling.build_model(tokenizer, seed=0)
    query = "The food Anna likes most is"
    lps = probes.food_logprobs(model, tokenizer, query)
    assert list(lps) == data.FOODS
    assert lps["plums"] == pytest.approx(evaluation.continuation_logprob(model, tokenizer, query, " plums"))
    assert all(v < 0 for v in lps.values()) and len(set(lps.values())) > 1
    assert list(probes.food_logprobs(model, tokenizer, query, ["tea", "figs"])) == ["tea", "figs"]


def test_subset_accuracy_counts_only_the_kept_questions():
    samples = [{"question": "What is 1 plus 2?", "correct": True}, {"question": "What is 3 plus 4?", "correct": False},
               {"question": "Add 5 and 6.", "correct": False}, {"question": "Anna has 2 pens.", "correct": True}]
    assert probes.subset_accuracy(samples, lambda q: q.startswith("What is")) == 0.5
    assert probes.subset_accuracy(samples, lambda q: q.startswith(("What is", "Add "))) == pytest.approx(1 / 3)
    assert probes.subset_accuracy(samples, lambda q: not q.startswith(("What is", "Add "))) == 1.0
    with pytest.raises(ValueError):
        probes.subset_accuracy(samples, lambda q: False)


def test_memorised_share_reads_the_answer_block():
    samples = [{"completion": data.format_completion(10, 20)}, {"completion": data.format_completion(11, 20)},
               {"completion": "<think>so 30</think><answer>30</answer>"}, {"completion": "no answer 30"}]
    assert probes.memorised_share(samples, {"30"}) == 0.5
    assert probes.memorised_share(samples, ["31", "30"]) == 0.75
    assert probes.memorised_share(samples, []) == 0.0


def test_pair_accuracy_by_flaw():
    rows = [{"flaw": "mismatch"}, {"flaw": "no_tags"}, {"flaw": "mismatch"}, {"flaw": "mismatch"}]
    scores = {"chosen": torch.tensor([1.0, 2.0, 0.0, 5.0]), "rejected": torch.tensor([0.0, 3.0, 1.0, 4.0])}
    assert probes.pair_accuracy_by(rows, scores) == {"mismatch": pytest.approx(2 / 3), "no_tags": 0.0}
    with pytest.raises(ValueError):
        probes.pair_accuracy_by(rows[:3], scores)


def test_near_miss_pairs_contradict_the_think_by_one_digit():
    problems = data.load_jsonl("arithmetic", "test", n=40)
    pairs = probes.near_miss_pairs(problems)
    for i, (p, pair) in enumerate(zip(problems, pairs)):
        assert pair["prompt"] == p["question"] and pair["chosen"] == p["completion"]
        assert int(extract_answer(pair["rejected"])) - int(p["answer"]) == [-10, -1, 1, 10][i % 4]
        assert extract_think(pair["rejected"]) == extract_think(p["completion"])   # the think still ends right
        assert is_well_formatted(pair["rejected"]) and not is_correct(pair["rejected"], p["answer"])


def test_consistent_but_wrong_is_another_problems_right_answer():
    problems = data.load_jsonl("arithmetic", "test", n=40)
    for p, pair in zip(problems, probes.consistent_wrong_pairs(problems)):
        wrong = probes.consistent_but_wrong(p)
        assert pair == {"prompt": p["question"], "chosen": p["completion"], "rejected": wrong}
        delta = [-10, -1, 1, 10][p["a"] % 4]
        assert is_correct(wrong, str(p["a"] + p["b"] + delta)) and not is_correct(wrong, p["answer"])
        assert evaluation.think_conclusion(wrong) == int(extract_answer(wrong))   # self-consistent


def test_candidate_answers_holds_one_right_answer_and_five_kinds_of_wrong_one():
    p = data.load_jsonl("arithmetic", "test", n=5)[4]
    cands = probes.candidate_answers(p)
    assert list(cands) == ["correct", "consistent but wrong sum", "answer contradicts think",
                           "near miss (answer + 1)", "no tags", "answer twice"]
    assert cands["correct"] == p["completion"] and is_correct(cands["correct"], p["answer"])
    assert cands["no tags"] == f"The answer is {p['answer']}." and not is_well_formatted(cands["answer twice"])
    assert int(extract_answer(cands["answer contradicts think"])) == int(p["answer"]) + 37
    assert len(set(cands.values())) == 6
