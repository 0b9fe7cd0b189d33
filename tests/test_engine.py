"""The course's decoder returns what ``generate`` returns: the same logits, greedy tokens and draws."""
import pytest
import torch

from course_utils import engine, generation, modeling
from course_utils.chat import chat_prompt
from course_utils.data import load_jsonl


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return modeling.build_model(tokenizer, seed=0).eval(), tokenizer


@pytest.fixture(scope="module")
def prompts(tokenizer):
    # chat prompts of different lengths (left padding matters) and two plain ones
    return [chat_prompt(tokenizer, p["question"]) for p in load_jsonl("arithmetic", "test", n=24)] + \
        ["Anna likes", "1"]


def _enc(tok, prompts):
    with generation.eval_mode(torch.nn.Identity(), tok, padding_side="left"):
        return tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)


def test_step_logits_equal_the_full_forward_pass(tiny, prompts):
    """Teacher-forced through the cache, every step's logits are the forward pass's at that position."""
    model, tok = tiny
    enc = _enc(tok, prompts)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    cont = torch.randint(3, model.config.vocab_size, (ids.size(0), 5), generator=torch.Generator().manual_seed(0))
    full_ids, full_mask = torch.cat([ids, cont], 1), torch.cat([mask, torch.ones_like(cont)], 1)
    with torch.no_grad():
        positions = (full_mask.cumsum(1) - 1).clamp(min=0)
        expected = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions).logits
        dec = engine._Decoder(model, ids.size(0), full_ids.size(1))
        p = ids.size(1)
        bias, prefill = engine.attention_biases(mask, full_ids.size(1))
        got = [dec.forward(ids, positions[:, :p], 0, prefill)]
        for t in range(cont.size(1)):
            bias[:, p + t] = 0.0
            got.append(dec.forward(cont[:, t:t + 1], positions[:, p + t:p + t + 1], p + t,
                                   bias[:, None, None, :p + t + 1]))
    torch.testing.assert_close(torch.stack(got, 1), expected[:, p - 1:], atol=1e-4, rtol=1e-4)


def test_greedy_equals_generate(tiny, prompts):
    model, tok = tiny
    fast = generation.sample_completions(model, tok, prompts, temperature=0, max_new_tokens=20, use_engine=True)
    slow = generation.sample_completions(model, tok, prompts, temperature=0, max_new_tokens=20, use_engine=False)
    assert fast.texts == slow.texts
    assert torch.equal(fast.completion_ids, slow.completion_ids)
    assert torch.equal(fast.completion_mask, slow.completion_mask)


def test_sampling_draws_the_tokens_generate_draws(tiny, prompts):
    """Same RNG state, same probabilities, same ``torch.multinomial`` calls: the same samples."""
    model, tok = tiny
    runs = []
    for use_engine in (True, False):
        torch.manual_seed(3)
        runs.append(generation.sample_completions(model, tok, prompts, num_samples=2, temperature=0.8,
                                                  max_new_tokens=12, return_logps=True, use_engine=use_engine))
    fast, slow = runs
    assert fast.texts == slow.texts
    assert torch.equal(fast.completion_ids, slow.completion_ids)
    assert torch.equal(fast.completion_mask, slow.completion_mask)


def test_rows_that_end_early_match_generate(tiny, prompts):
    """With end tokens the model emits, rows stop at different steps: ids, padding and masks still agree."""
    model, tok = tiny
    first = generation.sample_completions(model, tok, prompts, temperature=0, max_new_tokens=6, use_engine=False)
    common = torch.bincount(first.completion_ids[:, 2:].flatten()).topk(2).indices.tolist()
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, *common]
    try:
        fast, slow = (generation.sample_completions(model, tok, prompts, temperature=0, max_new_tokens=12,
                                                    use_engine=e) for e in (True, False))
    finally:
        model.generation_config.eos_token_id = saved
    lengths = slow.lengths
    assert lengths.min() < lengths.max()                       # the case is really exercised
    assert torch.equal(fast.completion_ids, slow.completion_ids)
    assert torch.equal(fast.completion_mask, slow.completion_mask)


def test_sampled_tokens_follow_the_model_distribution(tiny):
    """Frequencies of the first sampled token match softmax(z / T) (a chi-square-sized tolerance)."""
    model, tok = tiny
    enc = _enc(tok, ["Anna likes"] * 4000)
    torch.manual_seed(0)
    with generation.eval_mode(model):
        tokens = engine.decode(model, enc["input_ids"], enc["attention_mask"], 1, eos_ids=[], pad_id=0,
                               temperature=1.5)[:, 0]
        probs = torch.softmax(model(input_ids=enc["input_ids"][:1]).logits[0, -1] / 1.5, -1)
    freq = torch.bincount(tokens, minlength=probs.numel()).float() / tokens.numel()
    top = probs.argsort(descending=True)[:10]
    assert (freq[top] - probs[top]).abs().max() < 4 * (probs[top] * (1 - probs[top]) / tokens.numel()).sqrt().max()


def test_lora_model_is_decoded_with_its_adapter(tiny, prompts):
    from peft import LoraConfig, get_peft_model
    model, tok = tiny
    copy = modeling.build_model(tok, seed=0)
    peft_model = get_peft_model(copy, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False)).eval()
    assert engine.supports(peft_model)
    for adapter_off in (False, True):
        ctx = peft_model.disable_adapter() if adapter_off else torch.no_grad()
        with ctx:
            fast = generation.generate(peft_model, tok, prompts, max_new_tokens=10)
            slow = generation.sample_completions(peft_model, tok, prompts, temperature=0, max_new_tokens=10,
                                                 use_engine=False).texts
        assert fast == slow
    base = generation.generate(model, tok, prompts, max_new_tokens=10)
    assert base != generation.generate(peft_model, tok, prompts, max_new_tokens=10)   # the adapter was applied


def test_lora_layers_become_one_weight_that_computes_their_forward(tiny):
    """A LoRA Linear is W + scaling * B @ A (adapter on), W (adapter off); dropout or DoRA keep the module call."""
    from peft import LoHaConfig, LoraConfig, get_peft_model
    _, tok = tiny
    for extra in ({}, {"use_rslora": True, "lora_alpha": 16}):       # scaling alpha / r, or alpha / sqrt(r)
        peft_model = get_peft_model(modeling.build_model(tok, seed=0),
                                    LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False, **extra)).eval()
        layer = peft_model.get_base_model().model.layers[0].self_attn.q_proj
        x = torch.randn(5, layer.in_features, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            weight, bias = engine._linear_weights(layer)
            torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias), layer(x), atol=1e-5, rtol=1e-5)
            assert not torch.allclose(weight, layer.base_layer.weight)
            with peft_model.disable_adapter():
                off_weight, _ = engine._linear_weights(layer)
                assert off_weight is layer.base_layer.weight
    for config in (LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.1),
                   LoraConfig(r=4, target_modules="all-linear", use_dora=True),
                   LoHaConfig(r=4, target_modules=["q_proj"])):          # not a LoRA layer: no B @ A to fold
        other = get_peft_model(modeling.build_model(tok, seed=0), config)
        assert engine._linear_weights(other.get_base_model().model.layers[0].self_attn.q_proj) is None, config
    assert engine._linear_weights(torch.nn.Conv1d(2, 2, 1)) is None


def test_supports_falls_back_where_generate_would_change_the_logits(tiny, monkeypatch):
    model, tok = tiny
    assert engine.supports(model)
    for field, value in (("repetition_penalty", 1.3), ("min_p", 0.1), ("num_beams", 2)):
        neutral = getattr(model.generation_config, field)
        setattr(model.generation_config, field, value)
        try:
            assert not engine.supports(model), field
        finally:
            setattr(model.generation_config, field, neutral)
    assert engine.supports(model)
    assert not engine.supports(modeling.build_model(tok, seed=0).to(torch.bfloat16))   # bf16 keeps generate
    silly = modeling.build_model(tok, seed=0)
    silly.config.hidden_act = "gelu"
    assert not engine.supports(silly)
    monkeypatch.setenv(engine.ENV_SWITCH, "0")
    assert not engine.supports(model)
    assert not engine.supports(torch.nn.Linear(2, 2))


def test_decode_edge_cases(tiny):
    model, tok = tiny
    enc = _enc(tok, ["Anna likes", "1 + 1 ="])
    with generation.eval_mode(model):
        assert engine.decode(model, enc["input_ids"], enc["attention_mask"], 0, [2], 0).shape == (2, 0)
        eos_first = engine.decode(model, enc["input_ids"], enc["attention_mask"], 8,
                                  eos_ids=list(range(model.config.vocab_size)), pad_id=0)
        assert eos_first.shape == (2, 1)   # every token ends a row: one step, then stop
        with pytest.raises(ValueError):
            engine.decode(model, enc["input_ids"][0], enc["attention_mask"], 4, [2], 0)
    assert generation.sample_completions(model, tok, ["Anna likes"], max_new_tokens=0).completion_ids.shape == (1, 1)
