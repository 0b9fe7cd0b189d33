import math

import pytest

from course_utils import data, evaluation, modeling


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return modeling.build_model(tokenizer, seed=0), tokenizer


def test_generate_returns_one_string_per_prompt(tiny):
    model, tok = tiny
    outs = evaluation.generate(model, tok, ["Anna likes", "1 + 1 ="], max_new_tokens=5, batch_size=1)
    assert len(outs) == 2 and all(isinstance(o, str) for o in outs)
    assert tok.padding_side == "right"  # restored
    with pytest.raises(TypeError):
        evaluation.generate(model, tok, "not a list")


def test_evaluate_arithmetic_on_untrained_model(tiny):
    model, tok = tiny
    res = evaluation.evaluate_arithmetic(model, tok, n=200, max_new_tokens=4, return_samples=True)
    assert res["n"] == 200 and 0 <= res["accuracy"] <= 1 and len(res["samples"]) == 200
    with pytest.raises(ValueError, match="at least 200"):
        evaluation.evaluate_arithmetic(model, tok, n=50)


def test_losses_of_untrained_model_near_uniform(tiny):
    model, tok = tiny
    texts = [r["text"] for r in data.load_jsonl("corpus", "validation", n=20)]
    loss = evaluation.mean_token_loss(model, tok, texts)
    assert abs(loss - math.log(len(tok))) < 0.5
    train = [r["text"] for r in data.load_jsonl("corpus", "train", n=500)]
    assert evaluation.unigram_baseline_loss(tok, train, texts) < loss
