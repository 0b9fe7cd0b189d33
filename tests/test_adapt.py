"""The adapter on tokenizers and models of other families, built here offline in seconds."""
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from course_utils import adapt
from course_utils.chat import chat_prompt, encode_chat
from course_utils.data import to_messages
from course_utils.modeling import family_model, save_family_model
from course_utils.modeling import train_tokenizer
from course_utils.rewards import COURSE_TAGS, SEED_TAGS


def llama_like():
    """Llama-style: byte-level BPE with <s>/</s>, no pad token, no chat template."""
    return family_model("llama")


def gpt2_like():
    """GPT-2-style: one <|endoftext|> token for BOS and EOS, no pad token, no template."""
    return family_model("gpt2")


def test_a_base_model_without_pad_or_template_gets_both_and_whole_tags():
    model, tokenizer = llama_like()
    rows_before = model.get_input_embeddings().weight.shape[0]
    assert tokenizer.pad_token is None and tokenizer.chat_template is None
    assert len(tokenizer("<answer>", add_special_tokens=False)["input_ids"]) > 1
    result = adapt.adapt(model, tokenizer)
    assert result.pad == adapt.PAD_TOKEN and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert result.template == "plain" and "it has no chat template" in result.changes[-1]
    assert set(result.added_tokens) == {adapt.PAD_TOKEN, *COURSE_TAGS.all()}
    assert model.get_input_embeddings().weight.shape[0] == rows_before + 5 == len(tokenizer)
    for tag in COURSE_TAGS.all():
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1
    # the tags survive decoding with skip_special_tokens (TRL decodes completions that way)
    ids = tokenizer("<think>1 + 2 = 3</think><answer>3</answer>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>1 + 2 = 3</think><answer>3</answer>"
    assert model.config.pad_token_id == tokenizer.pad_token_id == model.generation_config.pad_token_id
    assert not adapt.template_problems(tokenizer)
    # the course's chat functions work on it, and the answer ends with EOS
    prompt = chat_prompt(tokenizer, "What is 3 + 4?")
    assert prompt.endswith("Assistant: ")
    ids, n_prompt = encode_chat(tokenizer, to_messages("What is 3 + 4?"),
                                [{"role": "assistant", "content": "<think>3 + 4 = 7</think><answer>7</answer>"}])
    assert tokenizer.eos_token_id in ids[n_prompt:] and 0 < n_prompt < len(ids)
    mask = tokenizer.apply_chat_template(to_messages("q") + [{"role": "assistant", "content": "a"}],
                                         return_dict=True, return_assistant_tokens_mask=True)["assistant_masks"]
    assert 0 < sum(mask) < len(mask)   # the assistant's tokens only
    out = model.generate(torch.tensor([ids[:n_prompt]]), max_new_tokens=3, do_sample=False)
    assert out.shape[1] == n_prompt + 3


def test_a_pad_equal_to_eos_is_replaced_and_why():
    model, tokenizer = gpt2_like()
    tokenizer.pad_token = tokenizer.eos_token
    result = adapt.adapt(model, tokenizer)
    assert result.pad == adapt.PAD_TOKEN and "pad token was EOS" in result.changes[0]
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)


def test_the_course_model_needs_nothing():
    tokenizer = train_tokenizer()
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    model = Qwen3ForCausalLM(config)
    result = adapt.adapt(model, tokenizer)
    assert result.changes == () and result.template == "own" and result.added_tokens == ()
    assert result.max_new_tokens == 48   # the cpu-tiny profile's budget, found from the answers


def test_a_template_that_strips_the_tags_is_replaced_or_refused():
    # the shape of Qwen3's template for earlier turns: only what follows </think> is rendered
    stripping = ("{% for m in messages %}{{ m['role'] + ': ' }}{% if m['role'] == 'assistant' %}{% generation %}"
                 "{{ m['content'].split('</think>')[-1] + eos_token }}{% endgeneration %}{% else %}"
                 "{{ m['content'] }}{% endif %}{{ '\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")
    model, tokenizer = llama_like()
    tokenizer.chat_template = stripping
    with pytest.raises(adapt.AdaptationError, match=r"drops the reasoning tags \['<think>', '</think>'\]"):
        adapt.adapt(model, tokenizer, keep_template=True)
    model, tokenizer = llama_like()
    tokenizer.chat_template = stripping
    result = adapt.adapt(model, tokenizer)
    assert result.template == "plain" and "drops the reasoning tags" in result.changes[-1]


def test_qwen3s_own_template_rewrites_the_think_block():
    """Qwen3's template (as TRL ships it) moves a <think> block into its own lines: not the course's format."""
    import trl
    template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text(encoding="utf-8")
    tokenizer = train_tokenizer()
    problems = adapt.template_problems(tokenizer, template=template)
    assert any("rewrites the text between the reasoning tags" in p or "drops" in p for p in problems), problems


def test_other_tags_are_checked_too():
    model, tokenizer = gpt2_like()
    result = adapt.adapt(model, tokenizer, tags=SEED_TAGS)
    assert set(SEED_TAGS.all()) <= set(result.added_tokens) and result.template == "plain"


def test_what_cannot_be_adapted_says_what_is_missing():
    model, tokenizer = llama_like()
    tokenizer.eos_token = None
    with pytest.raises(adapt.AdaptationError, match="no EOS token"):
        adapt.adapt(model, tokenizer)

    class NoEmbeddings(torch.nn.Module):
        def get_input_embeddings(self):
            return None

    _, tokenizer = llama_like()
    with pytest.raises(adapt.AdaptationError, match="no token embeddings"):
        adapt.adapt(NoEmbeddings(), tokenizer)
    broken = "{{ messages[0]['nope']['deeper'] }}"
    _, tokenizer = llama_like()
    tokenizer.chat_template = broken
    assert "fails on a plain chat" in adapt.template_problems(tokenizer)[0]


def test_the_budget_follows_the_tokenizer():
    from transformers import PreTrainedTokenizerFast

    from course_utils.modeling import byte_bpe
    _, coarse = llama_like()
    fine = PreTrainedTokenizerFast(tokenizer_object=byte_bpe(["</s>"], vocab_size=260), eos_token="</s>")
    assert adapt.answer_budget(fine) > adapt.answer_budget(coarse) >= 16
    assert adapt.answer_budget(coarse) % 16 == 0


def test_your_own_model_from_a_folder_is_the_pretrain_stage_on_a_cpu(tmp_path, monkeypatch):
    """COURSE_MODEL names a local folder: the profile measures its budget, ``pretrain`` is that model adapted,
    and the check cells do not assert (their thresholds are the tiny model's)."""
    from dataclasses import dataclass

    from course_utils import experiment, stages
    from course_utils.run_config import get_profile
    folder = save_family_model("llama", tmp_path / "my-llama")
    monkeypatch.setenv("COURSE_MODEL", str(folder))
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path / "artifacts"))
    profile = get_profile("cpu-tiny")
    assert profile.model_id == str(folder) and profile.is_cpu and profile.slug.startswith("cpu-tiny-my-llama-")
    assert profile.max_new_tokens == adapt.answer_budget(adapt_copy(folder)) and profile.max_new_tokens % 16 == 0
    assert stages.is_hub_stage("pretrain", profile) and stages.stage_exists("pretrain", profile) is False
    loaded, tok = stages.load_stage("pretrain", profile)
    assert loaded.dtype == torch.float32 and tok.pad_token == adapt.PAD_TOKEN and tok.chat_template
    assert loaded.get_input_embeddings().weight.shape[0] == len(tok)

    @dataclass
    class Params:
        seed: int | None = None

    assert not experiment.calibrated(Params(), Params, profile)
    assert "the model " + str(folder) in experiment.not_checked(Params(), Params, profile)


def adapt_copy(folder):
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    adapt.adapt_tokenizer(tokenizer)
    return tokenizer


def test_a_saved_adapted_tokenizer_reloads_padding_on_the_right(tmp_path):
    """Found by the model matrix: a tokenizer without padding_side in its config reloaded on the direction its
    backend last padded in (generation's left), and 03's reward model then scored a pad-side token."""
    from transformers import AutoTokenizer

    from course_utils.generation import eval_mode
    model, tokenizer = llama_like()
    tokenizer.padding_side = "left"
    result = adapt.adapt(model, tokenizer)
    assert tokenizer.padding_side == "right" and any("pads on the right" in c for c in result.changes)
    with eval_mode(model, tokenizer, padding_side="left"):
        tokenizer(["1 + 2", "10 + 20 = 30"], padding=True)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.padding_side == "right"
    ids = reloaded(["1 + 2", "10 + 20 = 30"], padding=True)["input_ids"]
    assert ids[0][-1] == reloaded.pad_token_id and ids[0][0] != reloaded.pad_token_id
