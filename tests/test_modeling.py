import pytest
import torch

from course_utils import modeling
from course_utils.chat import chat_prompt


def test_digits_split_one_per_token(tokenizer):
    assert tokenizer.tokenize("1234") == ["1", "2", "3", "4"]


def test_tags_are_single_non_special_tokens(tokenizer):
    text = "<think>2 + 3 = 5</think><answer>5</answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    for tag in modeling.TAG_TOKENS:
        assert tokenizer.convert_tokens_to_ids(tag) in ids
        assert tag not in tokenizer.all_special_tokens
    # TRL decodes with skip_special_tokens=True: the tags must survive, EOS must not
    decoded = tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True)
    assert decoded == text


def test_chat_template_marks_only_assistant_tokens(tokenizer):
    msgs = [{"role": "user", "content": "What is 2 plus 3?"},
            {"role": "assistant", "content": "<think>2 + 3 = 5</think><answer>5</answer>"}]
    out = tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    trained = [t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tokenizer.decode(trained) == msgs[1]["content"] + modeling.EOS_TOKEN
    assert chat_prompt(tokenizer, "hi").endswith("<|im_start|>assistant\n")


def test_tokenizer_is_deterministic(tokenizer):
    again = modeling.train_tokenizer()
    assert again.get_vocab() == tokenizer.get_vocab()


def test_tokenizer_rejects_tiny_vocab():
    with pytest.raises(ValueError, match="too small"):
        modeling.train_tokenizer(["a b c"], vocab_size=100)


def test_model_is_a_small_qwen3(tokenizer):
    model = modeling.build_model(tokenizer, seed=0)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    n = modeling.count_parameters(model)["total"]
    assert 3e5 < n < 5e6, n
    assert model.config.vocab_size == len(tokenizer)


def test_same_seed_same_weights(tokenizer):
    a, b = modeling.build_model(tokenizer, seed=1), modeling.build_model(tokenizer, seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_safetensors_roundtrip(tokenizer, tmp_path):
    from course_utils.stages import load_checkpoint
    model = modeling.build_model(tokenizer, seed=0)
    path = modeling.save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    assert (path / "model.safetensors").exists() and not list(path.glob("*.bin"))
    loaded, tok = load_checkpoint(path)
    assert tok.get_vocab() == tokenizer.get_vocab()
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_non_safetensors_checkpoint_is_refused(tmp_path):
    (tmp_path / "pickled").mkdir()
    torch.save({"w": torch.zeros(1)}, tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors"):
        modeling.check_safetensors_dir(tmp_path / "pickled")
    with pytest.raises(ValueError, match="is a file"):
        modeling.check_safetensors_dir(tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError):
        modeling.check_safetensors_dir(tmp_path / "absent")


def test_disable_dropout_makes_training_mode_deterministic():
    import torch
    from course_utils.modeling import family_model
    from course_utils.modeling import disable_dropout
    model, _ = family_model("gpt2")   # dropout 0.1 in its config
    model.train()
    ids = torch.tensor([[5, 6, 7, 8]])
    assert not torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)
    disable_dropout(model)
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_widen_heads_keeps_the_function():
    """``widen_heads`` re-expresses a Qwen3 in wider heads: the same logits and greedy continuations (norm weights
    perturbed, so that the q-norm's rescaling is tested), the input left as it was; a narrower size is refused."""
    from transformers import Qwen3ForCausalLM

    from course_utils.modeling import tiny_qwen3_config, widen_heads
    torch.manual_seed(0)
    narrow = Qwen3ForCausalLM(tiny_qwen3_config(64)).eval()
    with torch.no_grad():
        for p in narrow.parameters():
            p.add_(0.05 * torch.randn_like(p))
    before = {k: v.clone() for k, v in narrow.state_dict().items()}
    wide = widen_heads(narrow, 32).eval()
    assert wide.config.head_dim == 32 and narrow.config.head_dim == 24
    assert wide.config.rope_parameters["rope_theta"] == pytest.approx(10000.0 ** (32 / 24))
    ids = torch.randint(0, 64, (3, 40))
    with torch.no_grad():
        assert torch.allclose(wide(ids).logits, narrow(ids).logits, atol=1e-4)
    assert torch.equal(wide.generate(ids[:, :5], max_new_tokens=20, do_sample=False),
                       narrow.generate(ids[:, :5], max_new_tokens=20, do_sample=False))
    assert all(torch.equal(before[k], v) for k, v in narrow.state_dict().items())
    with pytest.raises(ValueError, match="at least"):
        widen_heads(narrow, 16)
    from transformers import LlamaConfig, LlamaForCausalLM
    with pytest.raises(ValueError, match="handles Qwen3"):
        widen_heads(LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=96, num_attention_heads=4,
                                                 num_hidden_layers=1, intermediate_size=64)), 32)


def test_head_dim_is_set_apart_from_the_width_as_qwen3_allows():
    """The default head size is hidden_size // heads; ``head_dim=32`` (the smallest vLLM's CPU attention accepts,
    vllm/v1/attention/backends/cpu_attn.py) widens the attention projections and leaves the width alone."""
    from transformers import Qwen3ForCausalLM

    from course_utils.distill import STUDENT_SHAPE
    from course_utils.modeling import course_model_shape, tiny_qwen3_config
    assert tiny_qwen3_config(596).head_dim == 24 and course_model_shape()["head_dim"] is None
    for shape in ({}, STUDENT_SHAPE):
        config = tiny_qwen3_config(596, head_dim=32, **shape)
        assert config.head_dim == 32 != config.hidden_size // config.num_attention_heads
        model = Qwen3ForCausalLM(config)
        assert model.model.layers[0].self_attn.q_proj.out_features == 32 * config.num_attention_heads
        assert model.model.layers[0].self_attn.o_proj.out_features == config.hidden_size
