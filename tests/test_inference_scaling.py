"""Notebook 10's helpers: picking one answer from N, step labels and the PRM, the generative judge."""
import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForTokenClassification

from course_utils import data, evaluation, inference_scaling as scaling
from course_utils.modeling import build_model
from course_utils.run_config import get_profile


# --------------------------------------------------------------------------- picking one answer
def test_majority_vote_ignores_unparsable_and_breaks_ties_by_first_seen():
    assert scaling.majority_vote([3, None, 5, 5, 3]) == 3          # 3 and 5 tie; 3 came first
    assert scaling.majority_vote([None, 7, 7, 3]) == 7
    assert scaling.majority_vote([None, None]) is None
    assert scaling.majority_vote([]) is None


def test_weighted_vote_and_best_of_n():
    assert scaling.weighted_vote([1, 2, 2], [5.0, 2.0, 2.0]) == 1
    assert scaling.weighted_vote([1, 2, 2], [3.0, 2.0, 2.0]) == 2
    assert scaling.weighted_vote([None], [1.0]) is None
    assert scaling.best_of_n([4, 5, 6], [0.1, 0.9, 0.9]) == 5          # first of the tied best
    assert scaling.best_of_n([], []) is None


def test_curves_read_the_first_n_answers():
    answers = [[1, 2, 2, 2], [7, 7, 3, 3]]
    truth = [2, 3]
    assert scaling.curve(answers, truth, scaling.majority_vote, ns=(1, 2, 4)) == {1: 0.0, 2: 0.0, 4: 0.5}
    scores = [[0, 1, 0, 0], [0, 0, 0, 5]]
    assert scaling.curve(answers, truth, scaling.best_of_n, scores, ns=(1, 2, 4, 8)) == {1: 0.0, 2: 0.5, 4: 1.0}
    correct = np.array([[0, 1, 1, 1], [0, 0, 1, 1]], dtype=bool)
    assert scaling.pass_curve(correct, ns=(1, 2, 4)) == {1: 0.0, 2: 0.5, 4: 1.0}


def test_vote_over_wordings_answers_every_wording_in_order_and_votes_per_problem(tokenizer, monkeypatch):
    asked = []

    def fake_generate(model, tok, prompts, max_new_tokens, batch_size):   # answers 5, 5, 9 then 7, 8, 8
        asked.extend(prompts)
        return [f"<think>x</think><answer>{a}</answer>" for a in (5, 5, 9, 7, 8, 8)][:len(prompts)]

    monkeypatch.setattr(scaling, "generate", fake_generate)
    wordings = [["q1 a", "q1 b", "q1 c"], ["q2 a", "q2 b", "q2 c"]]
    vote = scaling.vote_over_wordings(None, tokenizer, wordings, [5, 7], max_new_tokens=8)
    assert [p.count("q1 ") + 2 * p.count("q2 ") for p in asked] == [1, 1, 1, 2, 2, 2]   # problem by problem
    assert vote.right.tolist() == [[True, True, False], [True, False, False]]
    assert vote.curve == {1: 1.0, 2: 1.0}                     # N = 2: 5,5 -> 5 right; 7,8 tie -> 7 (first) right
    assert len(vote.texts) == 6
    with pytest.raises(ValueError, match="right answers"):
        scaling.vote_over_wordings(None, tokenizer, wordings, [5], max_new_tokens=8)
    with pytest.raises(ValueError, match="same number"):
        scaling.vote_over_wordings(None, tokenizer, [["a"], ["b", "c"]], [1, 2], max_new_tokens=8)


def test_wilson_interval_contains_the_estimate_and_stays_in_0_1():
    lo, hi = evaluation.wilson_interval(150, 300)
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * (0.25 / 300) ** 0.5, rel=0.02)
    assert evaluation.wilson_interval(0, 300)[0] == 0.0 and evaluation.wilson_interval(300, 300)[1] == pytest.approx(1.0)
    assert evaluation.wilson_interval(300, 300)[0] > 0.98
    with pytest.raises(ValueError):
        evaluation.wilson_interval(1, 0)


def test_paraphrases_use_every_template_and_swap_every_second_pair_of_operands():
    p = next(r for r in data.load_jsonl("arithmetic", "test")                 # neither number inside the other
             if str(r["a"]) not in str(r["b"]) and str(r["b"]) not in str(r["a"]))
    a, b = str(p["a"]), str(p["b"])
    qs = scaling.paraphrase_questions(p, 8, random.Random(0))
    assert len(qs) == 8
    assert all(a in q and b in q for q in qs)
    first = ["a" if q.index(a) < q.index(b) else "b" for q in qs]     # which operand each wording states first
    assert first == ["a", "b"] * 4
    stems = {q.replace(a, "#").replace(b, "#").split("#")[0] for q in qs[:len(data.QUESTION_TEMPLATES)]}
    assert len(stems) >= 4                                               # the first six are the six templates
    plain = scaling.paraphrase_questions(p, 8, random.Random(0), swap_operands=False)
    assert all(q.index(a) < q.index(b) for q in plain)
    # the same draws either way: a swapped wording is the plain one with the two numbers exchanged
    assert [q.replace(a, "#").replace(b, "#") for q in qs] == [q.replace(a, "#").replace(b, "#") for q in plain]


# --------------------------------------------------------------------------- steps and the PRM
def test_step_spans_and_labels():
    right = data.format_completion(23, 35)
    spans = scaling.step_spans(right)
    assert [t for _, t in spans] == scaling.reference_steps(23, 35)
    assert all(right[:end].endswith(t) for end, t in spans)
    assert scaling.step_labels(right, 23, 35) == [1, 1, 1, 1]
    assert scaling.step_labels(data.format_completion(23, 36), 23, 35) == [0, 0, 0, 0]
    assert scaling.step_labels(data.format_completion(23, 45), 23, 35) == [1, 0, 0, 0]
    assert scaling.step_labels(data.format_completion(23, 35, answer=59), 23, 35) == [1, 1, 1, 0]
    assert scaling.step_labels("<answer>58</answer>", 23, 35) == [0]
    assert scaling.step_labels("", 23, 35) == [0]
    assert scaling.step_spans("<think>3 + 5 = 8, 2 + 3")[-1][1] == "2 + 3"    # a partial answer


def test_first_wrong_step_names_the_kind_of_mistake():
    assert scaling.first_wrong_step(data.format_completion(23, 35), 23, 35) == "right"
    assert scaling.first_wrong_step(data.format_completion(23, 45), 23, 35) == "tens column: misread a digit"
    assert scaling.first_wrong_step(data.format_completion(24, 35), 23, 35) == "ones column: misread a digit"
    slip = "<think>3 + 5 = 9, 2 + 3 + 0 = 5, so 59</think><answer>59</answer>"
    assert scaling.first_wrong_step(slip, 23, 35) == "ones column: added wrongly"
    assert scaling.first_wrong_step(data.format_completion(23, 35, answer=59), 23, 35) == "answer contradicts the working"
    assert scaling.first_wrong_step("<answer>58</answer>", 23, 35) == "format"
    assert scaling.reference_steps(19, 86) == ["9 + 6 = 15", "1 + 8 + 1 = 10", "so 105", "<answer>105</answer>"]


def test_misread_completions_are_consistent_and_wrong():
    rng = random.Random(1)
    for _ in range(50):
        text = scaling.misread_completion(23, 35, rng)
        assert not evaluation.is_correct(text, "58")
        assert evaluation.think_conclusion(text) == int(scaling.answers_of([text])[0])
        assert scaling.step_labels(text, 23, 35)[-1] == 0


def test_prm_rows_are_balanced_and_labelled():
    problems = data.load_jsonl("arithmetic", "train", n=400)
    rows = scaling.prm_training_rows(problems, seed=0)
    assert len(rows) == 400
    finals = [r["labels"][-1] for r in rows]
    assert 0.3 < np.mean(finals) < 0.5                                   # 40% right answers
    for r, p in zip(rows, problems):
        assert r["labels"] == scaling.step_labels(r["completion"], p["a"], p["b"])
        assert r["labels"][-1] == int(evaluation.is_correct(r["completion"], p["answer"]))


def test_encode_steps_puts_each_label_on_the_steps_last_token(tokenizer):
    q, text = "What is 23 plus 35?", data.format_completion(23, 35, answer=59)
    enc = scaling.encode_steps(tokenizer, q, text, scaling.step_labels(text, 23, 35))
    marked = [(tokenizer.convert_ids_to_tokens(i), l) for i, l in zip(enc["input_ids"], enc["labels"]) if l != -100]
    assert [l for _, l in marked] == [1, 1, 1, 0]
    assert [t for t, _ in marked][-1] == "</answer>" and len(enc["labels"]) == len(enc["input_ids"])
    with pytest.raises(ValueError, match="labels"):
        scaling.encode_steps(tokenizer, q, text, [1, 0])


def test_prm_trains_scores_and_steers_a_beam_search(tokenizer, tmp_path):
    torch.manual_seed(0)
    base = build_model(tokenizer, seed=0)
    base.save_pretrained(tmp_path / "base")
    prm = AutoModelForTokenClassification.from_pretrained(tmp_path / "base", num_labels=2)
    prm.config.pad_token_id = tokenizer.pad_token_id
    rows = scaling.prm_training_rows(data.load_jsonl("arithmetic", "train", n=64), seed=0)
    trainer = scaling.prm_trainer(prm, tokenizer, get_profile("cpu-tiny", seed=0), rows, tmp_path / "out",
                                  steps=2, learning_rate=1e-3, batch_size=8)
    trainer.train()
    assert trainer.state.global_step == 2
    texts = [r["completion"] for r in rows[:3]] + ["garbage without tags"]
    scores = scaling.prm_step_scores(prm, tokenizer, ["What is 1 plus 2?"] * 4, texts)
    assert [len(s) for s in scores] == [len(scaling.step_spans(t)) for t in texts]
    assert all(0.0 <= x <= 1.0 for s in scores for x in s)
    assert list(scaling.aggregate_steps([[0.5, 0.2], [0.9]], "min")) == [0.2, 0.9]
    assert scaling.aggregate_steps([[0.5, 0.2]], "prod")[0] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        scaling.aggregate_steps([[0.5]], "mean")
    best, tokens = scaling.prm_beam_search(base.eval(), prm, tokenizer, ["What is 1 plus 2?", "Add 10 and 20."],
                                           beams=2, expand=2, max_step_tokens=4, max_rounds=2, temperature=1.0)
    assert len(best) == 2 and all(isinstance(b, str) for b in best) and 0 < tokens <= 2 * 2 * 4 + 2 * 2 * 4


def test_next_step_cuts_before_the_separator():
    cut = scaling._next_step
    assert cut("", "<think>3 + 5 = 8, 2 + 3") == ("<think>3 + 5 = 8", False)
    assert cut("<think>3 + 5 = 8", ", 2 + 3 + 0 = 5, so 58</think>") == ("<think>3 + 5 = 8, 2 + 3 + 0 = 5", False)
    assert cut("<think>3 + 5 = 8, 2 + 3 + 0 = 5", ", so 58</think><answer>58") == (
        "<think>3 + 5 = 8, 2 + 3 + 0 = 5, so 58", False)
    done = "<think>3 + 5 = 8, 2 + 3 + 0 = 5, so 58</think><answer>58</answer>"
    assert cut(done[:38], done[38:]) == (done, True)
    assert cut("<think>3 + 5 = 8", ", 2 + 3 +") == ("<think>3 + 5 = 8, 2 + 3 +", True)     # ran out of tokens


# --------------------------------------------------------------------------- the generative judge
def test_grm_critiques_and_verdicts():
    rows = data.load_jsonl("preferences", "train", n=200)
    for r in rows:
        assert scaling.parse_verdict(scaling.grm_critique(r["chosen"])) == 1.0
        assert scaling.parse_verdict(scaling.grm_critique(r["rejected"])) == 0.0
    assert scaling.parse_verdict("<think>x</think><answer>gad</answer>") is None
    assert scaling.parse_verdict("") is None and scaling.parse_verdict(None) is None
    chats = scaling.grm_rows(rows[:3])
    assert len(chats) == 6 and chats[0]["messages"][0]["content"].startswith("Judge the answer.")


def test_the_three_judgement_styles_write_the_same_verdict_and_fit_their_token_budgets(tokenizer):
    rows = data.load_jsonl("preferences", "train", n=300)
    answers = [a for r in rows for a in (r["chosen"], r["rejected"])]
    mismatch = next(r["rejected"] for r in rows if r["flaw"] == "mismatch")
    broken = next(r["rejected"] for r in rows if r["flaw"] == "no_tags")
    assert scaling.grm_critique(mismatch, "verdict") == "<answer>bad</answer>"
    assert scaling.grm_critique(broken, "principles") == "<think>tags: broken</think><answer>bad</answer>"
    worked = scaling.grm_critique(mismatch, "critique")                      # <think>X and Y</think><answer>bad</answer>
    assert scaling.grm_critique(mismatch, "principles") == worked.replace("<think>", "<think>tags: ok; sum: ")
    for a in answers:
        verdicts = {scaling.parse_verdict(scaling.grm_critique(a, style)) for style in scaling.GRM_STYLES}
        assert len(verdicts) == 1 and verdicts != {None}
    for style in scaling.GRM_STYLES:   # the longest judgement and its end-of-text token fit the sampling budget
        longest = max(len(tokenizer(scaling.grm_critique(a, style), add_special_tokens=False)["input_ids"])
                      for a in answers)
        assert longest + 1 <= scaling.GRM_MAX_NEW_TOKENS[style], (style, longest)
    assert scaling.grm_rows(rows[:1], style="verdict")[1]["messages"][-1]["content"] == \
        scaling.grm_critique(rows[0]["rejected"], "verdict")
    with pytest.raises(ValueError, match="style"):
        scaling.grm_critique(mismatch, "essay")


def test_wrong_critiques_are_wrong_and_meta_rows_pair_them():
    rng = random.Random(0)
    for r in data.load_jsonl("preferences", "train", n=100):
        for answer in (r["chosen"], r["rejected"]):
            assert scaling.wrong_critique(answer, rng) != scaling.grm_critique(answer)
    rows = scaling.meta_rm_rows(data.load_jsonl("preferences", "train", n=10), seed=0)
    assert len(rows) == 10 and all(r["chosen"][0]["content"] != r["rejected"][0]["content"] for r in rows)


def test_verdict_scores_vote_and_the_meta_filter():
    good, bad, junk = ("<think>1 and 1</think><answer>good</answer>", "<think>1 and 2</think><answer>bad</answer>",
                       "<think>?</think><answer>?</answer>")
    crit = [[bad, good, good, junk]]
    assert scaling.verdict_scores(crit, 1)[0] == 0.0
    assert scaling.verdict_scores(crit, 4)[0] == pytest.approx((0 + 1 + 1 + 0.5) / 4)
    assert scaling.verdict_scores(crit, 4, meta_scores=[[9, 1, 2, 0]], keep=1)[0] == 0.0   # meta trusts the first
    assert scaling.verdict_scores(crit, 4, meta_scores=[[0, 1, 2, 0]], keep=2)[0] == 1.0
    assert scaling.pair_judgement_accuracy([1.0, 0.5, 0.0], [0.0, 0.5, 1.0]) == pytest.approx(0.5)
    # two pairs: k = 1 reads the first critique of each answer; the meta RM's filter keeps min(k, keep)
    chosen, rejected = [[bad, good, good, junk], [good, good, bad, bad]], [[good, good, good, bad], [bad, good, good, good]]
    assert scaling.judgement_curve(chosen, rejected, (1, 2, 4)) == {1: 0.5, 2: 0.5, 4: 0.0}
    meta_c, meta_r = [[0, 9, 1, 0], [0, 0, 0, 9]], [[9, 0, 0, 0], [0, 9, 0, 0]]   # each keeps one: good/bad, good/good
    assert scaling.judgement_curve(chosen, rejected, (4,), meta_c, meta_r, keep=1) == {4: 0.25}
    assert scaling.verdict_rates(chosen, rejected) == {"readable_rate": pytest.approx(15 / 16),
                                                       "right_verdict_rate": pytest.approx(6 / 16)}
    with pytest.raises(ValueError):
        scaling.verdict_rates([], [])


def test_plot_accuracy_curves_draws_every_method_with_its_colour():
    import matplotlib.pyplot as plt
    from course_utils import plotting
    ax = plotting.plot_accuracy_curves({"a": {1: 0.5, 2: 0.6}, "b": {1: 0.4, 4: 0.45}}, 300, x_scale={"a": 30, "b": 33},
                                       baselines={"greedy": 0.55}, colors={"a": "red"})
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert ax.get_xscale() == "log"
    plt.close(ax.figure)


def test_at_n_figures_and_their_columns():
    points = {8: 0.5, 1: 0.25}
    assert scaling.at_n(points) == {"at_1_accuracy": 0.25, "at_8_accuracy": 0.5}      # sorted by N
    assert scaling.at_n_columns([1, 8]) == {"at_1_accuracy": "N = 1", "at_8_accuracy": "N = 8"}
    assert scaling.at_n_columns([2], label="k") == {"at_2_accuracy": "k = 2"}
    from course_utils.experiment import Runs
    runs = Runs()
    runs.add("vote", show=False, **scaling.at_n(points))
    assert runs.table(scaling.at_n_columns([1, 8, 16])).splitlines()[-1] == "| vote | 25.0% | 50.0% | – |"


def test_meta_rm_scores_score_each_critique_on_its_own_judge_prompt(tokenizer, tmp_path):
    from transformers import AutoModelForSequenceClassification
    build_model(tokenizer, seed=0).save_pretrained(tmp_path / "base")
    meta = AutoModelForSequenceClassification.from_pretrained(tmp_path / "base", num_labels=1).eval()
    meta.config.pad_token_id = tokenizer.pad_token_id
    questions, answers = ["What is 1 plus 2?", "Add 10 and 20."], ["<answer>3</answer>", "<answer>31</answer>"]
    critiques = [["3 = 3<answer>good</answer>", "no verdict", "x"], ["30 != 31<answer>bad</answer>", "y", "z"]]
    scores = scaling.meta_rm_scores(meta, tokenizer, questions, answers, critiques, batch_size=4)
    assert scores.shape == (2, 3)
    one = evaluation.score_completions(meta, tokenizer, [scaling.grm_question(questions[1], answers[1])],
                                       [critiques[1][0]]).numpy()
    np.testing.assert_allclose(scores[1, 0], one[0], atol=1e-5)                 # row i, column j: critique j of i
    assert len({round(float(s), 6) for s in scores.ravel()}) > 1                 # different critiques, different scores
    with pytest.raises(ValueError, match="critiques"):
        scaling.meta_rm_scores(meta, tokenizer, questions, answers, critiques[:1])
    with pytest.raises(ValueError, match="same number"):
        scaling.meta_rm_scores(meta, tokenizer, questions, answers, [critiques[0], critiques[1][:2]])
