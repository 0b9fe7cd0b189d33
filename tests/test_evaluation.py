import math

import pytest
import torch

from course_utils import data, evaluation, modeling


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return modeling.build_model(tokenizer, seed=0), tokenizer


def test_evaluate_arithmetic_counts_right_answers(tiny, monkeypatch):
    """Feed known completions through the evaluation: accuracy, format rate and failures follow."""
    model, tok = tiny
    problems = data.load_jsonl("arithmetic", "test", n=200)
    fake = [p["completion"] if i % 4 == 0 else                                     # correct
            data.format_completion(p["a"], p["b"], answer=int(p["answer"]) + 1) if i % 4 == 1 else  # contradicts
            "no tags at all" if i % 4 == 2 else                                     # format error
            data.format_completion(p["a"], p["b"] + 1)                              # consistent wrong sum
            for i, p in enumerate(problems)]
    monkeypatch.setattr(evaluation, "generate", lambda *a, **k: fake)
    res = evaluation.evaluate_arithmetic(model, tok, n=200, max_new_tokens=48, return_samples=True)
    assert res["accuracy"] == 0.25 and res["format_rate"] == 0.75 and len(res["samples"]) == 200
    assert res["failures"] == {"correct": 0.25, "format error": 0.25, "answer contradicts think": 0.25,
                               "wrong sum": 0.25}
    assert res["right_off_working_rate"] == 0.0   # every right answer here follows from its working
    with pytest.raises(ValueError, match="at least 200"):
        evaluation.evaluate_arithmetic(model, tok, n=50, max_new_tokens=48)


def test_classify_failure_kinds():
    c = data.format_completion
    assert evaluation.classify_failure(c(23, 45), "68") == "correct"
    assert evaluation.classify_failure(c(23, 45, answer=61), "68") == "answer contradicts think"
    assert evaluation.classify_failure(c(23, 46), "68") == "wrong sum"
    assert evaluation.classify_failure("<answer>61</answer>", "68") == "format error"
    assert evaluation.classify_failure(None, "68") == "format error"
    assert evaluation.classify_failure("<answer>68</answer>", "68") == "correct"  # accuracy ignores the format


def test_right_off_working_flags_right_answers_their_working_does_not_reach():
    c = data.format_completion
    assert evaluation.right_off_working("<think>3 + 5 = 8, 2 + 3 + 0 = 5, so 49</think><answer>58</answer>", "58")
    assert evaluation.right_off_working(c(23, 36, answer=58), "58")           # working concludes 59
    assert not evaluation.right_off_working(c(23, 35), "58")                  # right, and the working agrees
    assert not evaluation.right_off_working(c(23, 35, answer=61), "58")       # off its working, but wrong
    assert not evaluation.right_off_working("<answer>58</answer>", "58")     # no working to disagree with
    assert not evaluation.right_off_working(None, "58")


def test_pass_at_k_estimator_matches_brute_force():
    from itertools import combinations
    for n, c, k in [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 1, 6), (4, 4, 2), (8, 3, 4)]:
        subsets = list(combinations([1] * c + [0] * (n - c), k))
        exact = sum(any(s) for s in subsets) / len(subsets)
        assert abs(evaluation.pass_at_k_estimator(n, c, k) - exact) < 1e-12, (n, c, k)
    assert evaluation.pass_at_k_estimator(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        evaluation.pass_at_k_estimator(4, 5, 1)


def test_pass_at_k_on_known_samples(tiny, monkeypatch):
    """Problem i gets (i % 3) right answers out of 2 samples... checked against the estimator."""
    from course_utils.generation import Completions
    model, tok = tiny
    problems = data.load_jsonl("arithmetic", "test", n=200)
    texts = []
    for i, p in enumerate(problems):
        right = min(i % 3, 2)
        texts += [p["completion"]] * right + ["wrong"] * (2 - right)

    def fake_sample(*args, num_samples, **kwargs):
        return Completions(texts, None, None, None, None, None, num_samples)
    monkeypatch.setattr(evaluation, "sample_completions", fake_sample)
    res = evaluation.pass_at_k(model, tok, k=2, n=200, max_new_tokens=48, greedy=False)
    shares = [min(i % 3, 2) / 2 for i in range(200)]
    assert res["pass@1"] == pytest.approx(sum(shares) / 200)
    assert res["pass@k"] == pytest.approx(sum(s > 0 for s in shares) / 200)


def test_losses_of_untrained_model_near_uniform(tiny):
    model, tok = tiny
    texts = [r["text"] for r in data.load_jsonl("corpus", "validation", n=20)]
    loss = evaluation.mean_token_loss(model, tok, texts)
    assert abs(loss - math.log(len(tok))) < 0.5
    train = [r["text"] for r in data.load_jsonl("corpus", "train", n=500)]
    assert evaluation.unigram_baseline_loss(tok, train, texts) < loss


def test_kl_to_reference_is_zero_for_the_model_itself_and_positive_for_another(tiny):
    model, tok = tiny
    torch.manual_seed(0)
    same = evaluation.kl_to_reference(model, model, tok, n=200, num_samples=1, max_new_tokens=8)
    assert same["n_samples"] == 200 and abs(same["kl"]) < 1e-4
    other = modeling.build_model(tok, seed=5)
    torch.manual_seed(0)
    far = evaluation.kl_to_reference(model, other, tok, n=200, num_samples=1, max_new_tokens=8)
    assert far["kl"] > 3 * far["stderr"] > 0   # two random models: clearly apart
