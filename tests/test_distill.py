"""Notebook 09's helpers: the student, the teacher's answers as data, hidden-state matching, the GKD trainer."""
import math

import pytest
import torch

from course_utils import data, distill, losses, rewards, training
from course_utils.modeling import build_model, count_parameters
from course_utils.run_config import get_profile
from course_utils.recipes import recipe_for


@pytest.fixture(scope="module")
def models(tokenizer):
    teacher = build_model(tokenizer, seed=0).eval()                     # the course's default size, random weights
    student = distill.build_student(tokenizer, seed=0)
    return teacher, student


def test_student_is_at_most_a_quarter_of_the_default_model(tokenizer, models):
    teacher, student = models
    assert count_parameters(student)["total"] <= count_parameters(teacher)["total"] / 4
    assert student.config.vocab_size == teacher.config.vocab_size
    wider = distill.build_student(tokenizer, seed=0, layers=3)
    assert wider.config.num_hidden_layers == 3 and wider.config.hidden_size == distill.STUDENT_SHAPE["hidden_size"]


def test_teacher_rows_keep_only_the_question(tokenizer, models):
    teacher, _ = models
    problems = data.load_jsonl("arithmetic", "train", n=6)
    rows, stats = distill.teacher_rows(teacher, tokenizer, problems, max_new_tokens=8)
    assert len(rows) == 6 and stats["problems"] == 6
    for row, p in zip(rows, problems):
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert row["messages"][0]["content"] == p["question"]
    answers = [row["messages"][1]["content"] for row in rows]
    # the statistics are the shares of these very answers that are right / equal to the reference text
    assert stats["teacher_correct"] == sum(rewards.is_correct(a, p["answer"]) for a, p in zip(answers, problems)) / 6
    assert stats["identical_to_reference"] == sum(a == p["completion"] for a, p in zip(answers, problems)) / 6
    perfect = [dict(p, answer=rewards.extract_answer(a) or "none", completion=a) for a, p in zip(answers, problems)]
    _, same = distill.teacher_rows(teacher, tokenizer, perfect, max_new_tokens=8)
    assert same["identical_to_reference"] == 1.0 and same["teacher_correct"] == sum(
        rewards.extract_answer(a) is not None for a in answers) / 6
    rows, stats = distill.teacher_rows(teacher, tokenizer, [{"question": p["question"]} for p in problems],
                                       max_new_tokens=4)
    assert set(stats) == {"problems"}                                   # no references, no comparison
    with pytest.raises(ValueError, match="at least one"):
        distill.teacher_rows(teacher, tokenizer, [])


def test_encode_rows_labels_are_the_answer(tokenizer):
    rows = data.sft_rows("train", n=3)
    ids, attention, labels = distill.encode_rows(tokenizer, rows)
    assert ids.shape == attention.shape == labels.shape
    for i, row in enumerate(rows):
        answer = tokenizer.decode(labels[i][labels[i] != -100])
        assert answer.startswith(row["messages"][1]["content"])
        assert int(attention[i].sum()) == int((ids[i] != tokenizer.pad_token_id).sum())


def test_train_hidden_matching(tokenizer, models):
    teacher, _ = models
    rows = data.sft_rows("train", n=8)
    for weight in (0.0, 1.0):
        student = distill.build_student(tokenizer, seed=1)
        before = [p.detach().clone() for p in student.parameters()]
        out = distill.train_hidden_matching(student, teacher, tokenizer, rows, steps=3, learning_rate=1e-3,
                                            hidden_weight=weight, layer_map={1: 2, 2: 4}, batch_size=4, seed=0)
        assert len(out["loss"]) == len(out["hidden_loss"]) == 3 and out["seconds"] > 0
        assert all(torch.isfinite(torch.tensor(out["loss"])))
        assert (max(out["hidden_loss"]) > 0) == (weight > 0)
        assert any(not torch.equal(a, b) for a, b in zip(before, student.parameters()))
        assert not student.training
    with pytest.raises(ValueError, match="outside"):
        distill.train_hidden_matching(distill.build_student(tokenizer, seed=1), teacher, tokenizer, rows, steps=1,
                                      learning_rate=1e-3, hidden_weight=1.0, layer_map={3: 1})


@pytest.mark.parametrize("lmbda", [0.0, 1.0])
def test_gkd_trainer_runs_off_and_on_policy(tokenizer, models, tmp_path, lmbda):
    teacher, _ = models
    student = distill.build_student(tokenizer, seed=2)
    profile = get_profile("cpu-tiny", seed=0)
    recipe = recipe_for("distill", profile, max_new_tokens=8, batch_size=4)
    rows = data.sft_rows("train", n=8)
    before = [p.detach().clone() for p in student.parameters()]
    trainer = training.gkd_trainer(
        student, teacher, tokenizer, profile, recipe, tmp_path, rows, steps=2, lmbda=lmbda, learning_rate=1e-3,
        temperature=0.5, logging_steps=1)
    assert trainer.args.beta == recipe.beta and trainer.lmbda == lmbda and not trainer.args.bf16
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, student.parameters()))
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)


def test_distill_recipe_is_registered():
    from course_utils.recipes import DistillRecipe
    profile = get_profile("cpu-tiny", seed=0)
    recipe = recipe_for("distill", profile)
    assert recipe == DistillRecipe() and recipe.beta == 0.0   # 09's runs are forward KL(teacher || student)
    # the loss the recipe's beta selects is the forward KL, computed here by hand on random logits
    student, teacher = torch.randn(3, 5, 11), torch.randn(3, 5, 11)
    p, log_p, log_q = teacher.softmax(-1), teacher.log_softmax(-1), student.log_softmax(-1)
    forward = (p * (log_p - log_q)).sum(-1).mean()
    assert torch.allclose(losses.generalized_jsd(student, teacher, beta=recipe.beta), forward, atol=1e-6)


def test_answer_confidence_entropy_and_top1():
    vocab = 7
    mask = torch.tensor([[1, 1, 0]])                               # (B, T - 1): the last position is not an answer
    uniform = torch.zeros(1, 4, vocab)
    flat = distill.answer_confidence(uniform, mask)
    assert flat["entropy"] == pytest.approx(math.log(vocab)) and flat["top1"] == pytest.approx(1 / vocab)
    sure = torch.zeros(1, 4, vocab)
    sure[:, :, 2] = 30.0                                           # all mass on one token
    assert distill.answer_confidence(sure, mask)["entropy"] < 1e-6
    assert distill.answer_confidence(sure, mask)["top1"] == pytest.approx(1.0)
    torch.manual_seed(0)
    logits = torch.randn(2, 5, vocab) * 3
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])
    for T in (1.0, 2.0):                                           # the naive computation, position by position
        p = torch.softmax(logits[:, :-1] / T, -1)
        ent = [float(-(p[b, t] * p[b, t].log()).sum()) for b in range(2) for t in range(4) if mask[b, t]]
        top = [float(p[b, t].max()) for b in range(2) for t in range(4) if mask[b, t]]
        got = distill.answer_confidence(logits, mask, T)
        assert got["entropy"] == pytest.approx(sum(ent) / len(ent), rel=1e-5)
        assert got["top1"] == pytest.approx(sum(top) / len(top), rel=1e-5)
    # a higher temperature flattens the distribution: more entropy, a lower top-1
    assert distill.answer_confidence(logits, mask, 5.0)["entropy"] > distill.answer_confidence(logits, mask)["entropy"]
    assert distill.answer_confidence(logits, mask, 5.0)["top1"] < distill.answer_confidence(logits, mask)["top1"]


def test_distillation_trainers_loss_is_the_mean_reverse_kl_of_onpolicy_token_signal(tokenizer, models, tmp_path):
    """On TRL's own on-policy batch: DistillationTrainer's loss (beta 1) is the masked mean of our per-token reverse
    KL, and the sampled tokens' log-ratio is a one-sample estimate of it (its mean over many samples is the KL)."""
    teacher, student = models
    rows = [{"prompt": [{"role": "user", "content": p["question"]}]} for p in data.load_jsonl("arithmetic", "train")[:8]]
    trainer = training.distillation_trainer(student, teacher, tokenizer, get_profile("cpu-tiny", seed=0), tmp_path,
                                            rows, steps=1, learning_rate=1e-3, batch_size=4, max_completion_length=8,
                                            temperature=1.0)
    torch.manual_seed(0)
    batch = trainer._generate_and_score_completions([trainer.train_dataset[i] for i in range(4)])
    with torch.no_grad():
        theirs = trainer.compute_loss(trainer.model, batch)
    signal = distill.onpolicy_token_signal(student, teacher, batch)
    mask = batch["completion_mask"].float()
    ours = signal["reverse_kl"].sum() / mask.sum()
    torch.testing.assert_close(ours, theirs.float(), rtol=1e-5, atol=1e-6)
    assert ours > 0 and (signal["reverse_kl"] >= -1e-6).all()
    torch.testing.assert_close(signal["log_ratio"], signal["student_logps"] - signal["teacher_logps"])
    assert (signal["log_ratio"][mask == 0] == 0).all()
    table = distill.signal_table(signal, batch, tokenizer, row=0).splitlines()
    assert table[0].startswith("| t | token | log q (student) |") and len(table) == 2 + int(mask[0].sum())
    with pytest.raises(KeyError):
        distill.onpolicy_token_signal(student, teacher, {"prompt_ids": batch["prompt_ids"]})
