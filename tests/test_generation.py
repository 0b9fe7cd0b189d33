import pytest
import torch

from course_utils import generation, losses, modeling


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return modeling.build_model(tokenizer, seed=0), tokenizer


def test_eval_mode_restores_on_error(tiny):
    model, tok = tiny
    model.train()
    with pytest.raises(RuntimeError):
        with generation.eval_mode(model, tok, padding_side="left"):
            assert not model.training and tok.padding_side == "left"
            raise RuntimeError("boom")
    assert model.training and tok.padding_side == "right"
    model.eval()


def test_generate_is_greedy_and_restores_padding(tiny):
    model, tok = tiny
    outs = generation.generate(model, tok, ["Anna likes", "1 + 1 ="], max_new_tokens=5, batch_size=1)
    assert outs == generation.generate(model, tok, ["Anna likes", "1 + 1 ="], max_new_tokens=5, batch_size=2)
    assert tok.padding_side == "right"
    with pytest.raises(TypeError):
        generation.generate(model, tok, "not a list")


def test_completion_mask_stops_after_first_eos():
    ids = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 9, 9, 9]])
    mask = generation.completion_mask_after_eos(ids, [2])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]


def test_sample_completions_shapes_grouping_and_logps(tiny):
    model, tok = tiny
    torch.manual_seed(0)
    prompts = ["Anna likes", "What is 12 plus 13?"]
    out = generation.sample_completions(model, tok, prompts, num_samples=3, temperature=1.0, max_new_tokens=6,
                                        return_logps=True, batch_size=4)   # 2 batches: padding is merged
    assert len(out.texts) == 6 and out.completion_ids.shape[0] == 6 and out.logps.shape == out.completion_ids.shape
    assert (out.logps[out.completion_mask == 0] == 0).all() and (out.logps[out.completion_mask == 1] < 0).all()
    # row i answers prompt i // 3
    first = tok(prompts[1], add_special_tokens=False)["input_ids"]
    row = out.prompt_ids[4][out.prompt_mask[4] == 1].tolist()
    assert row == first
    # the stored log-probs are those of the sampled tokens under the model
    again = losses.completion_logps(model, out.input_ids, out.attention_mask, out.full_completion_mask)
    torch.testing.assert_close(again[:, out.prompt_ids.size(1):], out.logps, atol=1e-4, rtol=1e-4)


def test_temperature_zero_is_greedy(tiny):
    model, tok = tiny
    a = generation.sample_completions(model, tok, ["Anna likes"], num_samples=2, temperature=0, max_new_tokens=5)
    assert a.texts[0] == a.texts[1] == generation.generate(model, tok, ["Anna likes"], max_new_tokens=5)[0]


def test_logps_under_rescores_the_sampled_tokens(tiny):
    """Scored by the model that sampled them (same temperature) they equal the stored logps, in any batching."""
    model, tok = tiny
    torch.manual_seed(0)
    out = generation.sample_completions(model, tok, ["a", "bb", "ccc"], num_samples=2, temperature=0.8,
                                        max_new_tokens=6, return_logps=True)
    whole = generation.logps_under(model, out, temperature=0.8)
    torch.testing.assert_close(whole, out.logps)
    torch.testing.assert_close(generation.logps_under(model, out, temperature=0.8, batch_size=4), whole)
    assert torch.all(whole[out.completion_mask == 0] == 0)
