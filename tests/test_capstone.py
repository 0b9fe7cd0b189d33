"""Notebook 11's recipe: the seed's template, data, length filter, rewards and configs."""
import copy
import dataclasses

import pytest
import torch

from course_utils import capstone, data, recipes, rewards
from course_utils.modeling import build_model
from course_utils.run_config import get_profile

TAGS = rewards.SEED_TAGS
SYSTEM = capstone.system_prompt(TAGS)


@pytest.fixture
def seed_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = capstone.reasoning_chat_template(SYSTEM, TAGS)
    return tok


def test_system_prompt_names_every_tag():
    for tag in TAGS.all():
        assert tag in SYSTEM


def test_template_renders_system_eos_user_and_opens_the_working_out(seed_tokenizer):
    chat = [{"role": "user", "content": "What is 1 plus 1?"}]
    text = seed_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text == SYSTEM + seed_tokenizer.eos_token + "What is 1 plus 1?" + TAGS.think_open
    own = [{"role": "system", "content": "Be brief, it's 'quoted'."}] + chat
    text = seed_tokenizer.apply_chat_template(own, tokenize=False)
    assert text.startswith("Be brief, it's 'quoted'." + seed_tokenizer.eos_token) and SYSTEM not in text


def test_priming_rows_keep_the_opening_tag_so_the_prompt_is_a_prefix(seed_tokenizer):
    problems = data.load_jsonl("arithmetic", "train", n=3)
    rows = capstone.priming_rows(problems, SYSTEM, TAGS)
    for row, p in zip(rows, problems):
        done = row["completion"][0]["content"]
        assert done.startswith(TAGS.think_open) and done.endswith(TAGS.answer_close)
        assert "<think>" not in done and f"{TAGS.answer_open}{p['answer']}{TAGS.answer_close}" in done
        prompt = seed_tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        full = seed_tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        assert full.startswith(prompt)
    with pytest.raises(KeyError, match="worked"):
        capstone.priming_rows([{"id": "x", "question": "q", "answer": "1"}], SYSTEM)


def test_rl_rows_and_the_length_filter(seed_tokenizer):
    problems = data.load_jsonl("arithmetic", "train", n=50)
    rows = capstone.rl_rows(problems, SYSTEM)
    assert rows[0]["answer"] == str(problems[0]["answer"]) and rows[0]["prompt"][0]["role"] == "system"
    lengths = capstone.prompt_lengths(rows, seed_tokenizer)
    assert min(lengths) > len(seed_tokenizer(SYSTEM)["input_ids"])
    kept, limit = capstone.filter_by_length(rows, lengths, 0.9)
    assert limit <= max(lengths) and all(n <= limit for r, n in zip(rows, lengths) if r in kept)
    kept, limit = capstone.filter_by_length(rows, list(range(50)), 0.9)     # distinct lengths: 10% go
    assert limit == 44 and len(kept) == 45 and kept == rows[:45]
    with pytest.raises(ValueError, match="one length per row"):
        capstone.filter_by_length(rows, lengths[:-1])


def test_seed_rewards_score_in_the_seed_order_and_never_raise():
    funcs = capstone.seed_reward_funcs(TAGS)
    assert [f.__name__ for f in funcs] == ["strict_format", "approx_format", "tiered_answer", "numeric_answer"]
    right = f"3 + 4 = 7{TAGS.think_close}{TAGS.answer_open}7{TAGS.answer_close}"   # after the prompt's opening tag
    assert [f([right], answer=["7"])[0] for f in funcs] == [1.0, 1.5, 5.0, 1.0]
    wrong = right.replace(">7<", ">9<")
    assert [f([wrong], answer=["7"])[0] for f in funcs] == [1.0, 1.5, rewards.TIERS["wrong"], 0.0]
    # no tags at all: no strict format, a -1 per missing tag (3: the opening one is in the prompt), no answer
    for junk in ["", None, "x" * 10_000, TAGS.think_open * 3]:
        assert [f([junk], answer=["7"])[0] for f in funcs] == [0.0, -3.0, rewards.TIERS["missing"], 0.0], junk
    assert [f([[{"role": "assistant", "content": right}]], answer=["7"])[0] for f in funcs] == [1.0, 1.5, 5.0, 1.0]
    with pytest.raises(ValueError):
        funcs[2]([right])            # the answer column is required: a clear error, not a silent 0


def test_evaluate_puts_the_opening_tag_back():
    right = f"1 + 1 = 2{TAGS.think_close}{TAGS.answer_open}2{TAGS.answer_close}"
    result = capstone.tagged_answer_rates([right, "garbage"], ["2", "2"], TAGS)
    assert result["accuracy"] == 0.5 and result["format_rate"] == 0.5 and result["correct"] == [True, False]
    assert capstone.tagged_answer_rates([right], ["2"], TAGS, prefixed=False)["format_rate"] == 0.0


def test_add_tag_tokens_copies_the_course_tags(tokenizer):
    tok = copy.deepcopy(tokenizer)
    model = build_model(tok, seed=0)
    emb = model.get_input_embeddings().weight
    think = emb[tok.convert_tokens_to_ids("<think>")].detach().clone()
    ids = capstone.add_tag_tokens(model, tok, TAGS)
    assert len(ids) == 4 and len(tok) == model.get_input_embeddings().weight.shape[0]
    for tag in TAGS.all():
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1
    assert torch.allclose(model.get_input_embeddings().weight[ids[0]], think)
    decoded = tok.decode(tok(TAGS.think_open + "1" + TAGS.answer_close)["input_ids"], skip_special_tokens=True)
    assert TAGS.think_open in decoded and TAGS.answer_close in decoded       # ordinary tokens survive TRL's decode
    assert capstone.add_tag_tokens(model, tok, TAGS) == []


def test_gsm8k_rows_become_problems():
    rows = [{"question": "Q?", "answer": "She has 3 + 4 = <<3+4=7>>7 pens.\n#### 1,007"},
            {"question": "no final", "answer": "nothing here"}]
    (p,) = capstone.gsm8k_problems(rows)
    assert p["answer"] == "1007" and "<<" not in p["completion"]
    assert p["completion"].startswith("<think>She has 3 + 4 = 7 pens.</think>")
    assert capstone.priming_rows([p], SYSTEM)[0]["completion"][0]["content"].endswith("<SOLUTION>1007</SOLUTION>")


def test_grpo_config_uses_trl_fields_for_the_seed_sampling(tmp_path):
    profile = get_profile("cpu-tiny")
    recipe = recipes.recipe_for("capstone", profile)
    args = capstone.grpo_config(recipe, profile, tmp_path)
    assert (args.min_p, args.top_p, args.temperature) == (recipe.min_p, 1.0, recipe.temperature)
    assert args.remove_unused_columns is False and args.reward_weights == list(capstone.REWARD_WEIGHTS)
    assert args.per_device_train_batch_size == recipe.prompts_per_step * recipe.num_generations
    assert args.warmup_steps == 0.1 and not args.use_vllm
    vllm_args = capstone.grpo_config(recipe, profile, tmp_path, use_vllm=True, vllm_mode="server")
    assert vllm_args.use_vllm and vllm_args.vllm_mode == "server"
    assert args.gradient_accumulation_steps == 1 and args.mask_truncated_completions is False
    assert args.beta == recipe.beta == 0.0 and args.loss_type == "dapo"       # the seed's: no KL term
    assert capstone.grpo_config(dataclasses.replace(recipe, beta=0.04), profile, tmp_path).beta == 0.04
    kw = capstone.vllm_sampling_kwargs(recipe, 3407, "<|im_end|>")
    assert kw["top_k"] == -1 and kw["stop"] == ["<|im_end|>"] and kw["min_p"] == 0.1
    gpu_recipe = dataclasses.replace(recipe, **recipes.CapstoneRecipe.GPU)
    assert gpu_recipe.lora_r == 32 and gpu_recipe.optim == "adamw_8bit"


def test_score_answers_is_an_eval_with_failures_tokens_and_samples(tokenizer):
    problems = [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "4"},
                {"question": "3+3?", "answer": "6"}]
    right = f"1 + 1 = 2{TAGS.think_close}{TAGS.answer_open}2{TAGS.answer_close}"
    wrong = f"2 + 2 = 5{TAGS.think_close}{TAGS.answer_open}5{TAGS.answer_close}"
    ev = capstone.score_answers([right, wrong, "no tags"], problems, tokenizer, TAGS)
    assert (ev.n, ev.accuracy, ev.format_rate, ev.correct) == (3, 1 / 3, 2 / 3, (True, False, False))
    assert ev.failures == pytest.approx({"not well formed": 1 / 3, "wrong answer": 1 / 3})
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in (right, wrong, "no tags")]
    assert ev.mean_tokens == sum(lengths) / 3 and ev.stderr == pytest.approx((2 / 9 / 3) ** 0.5)
    assert ev.samples[1] == {"question": "2+2?", "completion": wrong, "answer": "4", "correct": False}
    with pytest.raises(ValueError, match="as many completions"):
        capstone.score_answers([right], problems, tokenizer, TAGS)


def test_changed_answers_lists_the_fixed_and_the_broken(tokenizer):
    problems = [{"question": f"{i}+0?", "answer": str(i)} for i in range(3)]
    answer = [f"{i}{TAGS.think_close}{TAGS.answer_open}{i}{TAGS.answer_close}" for i in range(3)]
    before = capstone.score_answers([answer[0], "x", answer[2]], problems, tokenizer, TAGS)
    after = capstone.score_answers([answer[0], answer[1], "y"], problems, tokenizer, TAGS)
    changed = capstone.changed_answers(before, after)
    assert [(c["question"], c["fixed"], c["before"], c["after"]) for c in changed] == [
        ("1+0?", True, "x", answer[1]), ("2+0?", False, answer[2], "y")]
    assert capstone.changed_answers(before, before) == []
    with pytest.raises(ValueError, match="same problems"):
        capstone.changed_answers(before, capstone.score_answers(["x"], problems[:1], tokenizer, TAGS))


def test_measure_on_the_cpu_path_generates_the_seed_prompts_greedily(seed_tokenizer):
    from course_utils import generation
    model = build_model(seed_tokenizer, seed=0).eval()
    problems = data.load_jsonl("arithmetic", "test", n=4)
    ev = capstone.measure(model, seed_tokenizer, problems, SYSTEM, TAGS, max_new_tokens=6)
    prompts = capstone.eval_prompts(problems, SYSTEM, seed_tokenizer)
    assert all(p.endswith(TAGS.think_open) and problems[0]["question"] in prompts[0] for p in prompts)
    texts = generation.generate(model, seed_tokenizer, prompts, max_new_tokens=6)
    assert [s["completion"] for s in ev.samples] == texts and ev.n == 4
    assert ev == capstone.score_answers(texts, problems, seed_tokenizer, TAGS)
    with pytest.raises(ValueError, match="lora_request"):
        capstone.greedy_answers(model, seed_tokenizer, prompts, 6, lora_path="adapter")


def test_greedy_answers_with_vllm_pass_the_adapter_as_a_lora_request(monkeypatch):
    import sys
    import types

    class FakeVllmModel:     # unsloth's fast_inference model: save_lora / load_lora / fast_generate
        def load_lora(self, path):
            return f"lora:{path}"

        def fast_generate(self, prompts, sampling_params, lora_request):
            self.params, self.lora = sampling_params, lora_request
            out = types.SimpleNamespace
            return [out(outputs=[out(text=f"{p}!")]) for p in prompts]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    model, tok = FakeVllmModel(), types.SimpleNamespace(eos_token="<eos>")
    assert capstone.greedy_answers(model, tok, ["a", "b"], 64, use_vllm=True, lora_path="out/lora") == ["a!", "b!"]
    assert model.lora == "lora:out/lora"
    assert model.params == {"temperature": 0.0, "max_tokens": 64, "stop": ["<eos>"]}
    capstone.greedy_answers(model, tok, ["a"], 64, use_vllm=True)
    assert model.lora is None                      # no adapter: the base model


def test_api_drift_reports_what_the_pinned_trl_and_transformers_refuse(tmp_path):
    found = capstone.api_drift(get_profile("cpu-tiny"), tmp_path)
    assert found["GRPOConfig.vllm_sampling_params"] == "ABSENT" and found["GRPOConfig.max_prompt_length"] == "ABSENT"
    assert found["TrainingArguments.warmup_ratio"] == "ABSENT"
    assert found["GRPOConfig.min_p"] == found["GRPOConfig.generation_kwargs"] == "present"
    assert found["trl.PPOTrainer"] == found["SFTTrainer(tokenizer=...)"] == "ABSENT"
    assert found["GRPOConfig(max_prompt_length=256)"].startswith("TypeError") and "max_prompt_length" in found[
        "GRPOConfig(max_prompt_length=256)"]



def unsloth_like_config(module: str | None = None, name: str = "GRPOConfig"):
    """A stand-in for unsloth's patched GRPOConfig: a subclass of TRL's that, under an explicit ``dapo`` loss, widens
    the upper clip to 0.28 (unsloth 2026.10.9, models/rl.py). unsloth labels it with TRL's own module and name."""
    import trl
    base = trl.GRPOConfig

    def __init__(self, *args, **kwargs):
        if kwargs.get("loss_type") == "dapo" and kwargs.get("epsilon_high") is None:
            kwargs["epsilon_high"] = 0.28
        base.__init__(self, *args, **kwargs)

    cls = type(name, (base,), {"__init__": __init__})
    cls.__module__ = module or base.__module__
    return cls


def test_unsloth_patched_tells_unsloths_config_from_trls():
    import trl
    assert not capstone.unsloth_patched(trl.GRPOConfig)
    assert capstone.unsloth_patched(unsloth_like_config())      # same module and name as TRL's: its base gives it away
    assert capstone.unsloth_patched(unsloth_like_config("unsloth_compiled_cache.UnslothGRPOTrainer", "UnslothGRPOConfig"))


@pytest.mark.parametrize("module", [None, "unsloth_compiled_cache.UnslothGRPOTrainer"])
def test_api_drift_under_unsloths_patched_config_does_not_call_it(tmp_path, monkeypatch, module):
    import trl

    patched = unsloth_like_config(module)

    def refuse(self, *args, **kwargs):
        raise AssertionError("api_drift must not build unsloth's config")

    patched.__init__ = refuse
    monkeypatch.setattr(trl, "GRPOConfig", patched)
    found = capstone.api_drift(get_profile("cpu-tiny"), tmp_path)
    assert found["GRPOConfig(max_prompt_length=256)"].startswith("not tried: GRPOConfig is unsloth's patched config")


def test_grpo_config_keeps_trls_clip_and_turns_the_vllm_correction_off(tmp_path, monkeypatch):
    import trl
    profile = get_profile("cpu-tiny")
    recipe = recipes.recipe_for("capstone", profile)
    plain = capstone.grpo_config(recipe, profile, tmp_path)
    assert plain.epsilon == capstone.CLIP_EPSILON and plain.epsilon_high is None     # TRL's trainer: = epsilon
    assert capstone.grpo_config(recipe, profile, tmp_path, use_vllm=True).vllm_importance_sampling_correction is False
    monkeypatch.setattr(trl, "GRPOConfig", unsloth_like_config())
    assert unsloth_like_config()(output_dir=str(tmp_path), loss_type="dapo", use_cpu=True).epsilon_high == 0.28
    args = capstone.grpo_config(recipe, profile, tmp_path, use_vllm=True)
    assert (args.epsilon, args.epsilon_high) == (capstone.CLIP_EPSILON, capstone.CLIP_EPSILON)
    assert args.loss_type == "dapo" and args.vllm_importance_sampling_correction is False


def test_skipped_says_what_and_why(capsys):
    capstone.skipped("vllm.SamplingParams(...)", "vLLM needs CUDA")
    assert capsys.readouterr().out == "SKIPPED (GPU only): vllm.SamplingParams(...) — vLLM needs CUDA.\n"


def test_vllm_cpu_reason_says_why_vllm_cannot_serve_the_model(monkeypatch):
    """11's CPU path goes through vLLM only where vLLM's CPU build imports and takes the model's head size; otherwise
    it says why, and samples with HF generate. The course's heads (24) are widened to the smallest size it takes."""
    import importlib.util

    from course_utils.modeling import tiny_qwen3_config
    widened, course_model = tiny_qwen3_config(vocab_size=64, head_dim=32), tiny_qwen3_config(vocab_size=64)
    if importlib.util.find_spec("vllm") is not None:
        assert capstone.vllm_cpu_reason(widened) is None and capstone.vllm_cpu_widening(widened) is None
        assert "head size 24" in capstone.vllm_cpu_reason(course_model)
        assert capstone.vllm_cpu_widening(course_model) == 32        # the smallest size it takes above 24
        assert capstone.vllm_cpu_widening(tiny_qwen3_config(vocab_size=64, head_dim=1024)) is None
        from transformers import LlamaConfig          # a family widen_heads does not handle keeps its refusal
        llama = LlamaConfig(vocab_size=64, hidden_size=96, num_attention_heads=4, head_dim=24)
        assert capstone.vllm_cpu_widening(llama) is None and "head size 24" in capstone.vllm_cpu_reason(llama)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    assert "not installed" in capstone.vllm_cpu_reason(widened)
    assert capstone.vllm_cpu_widening(course_model) is None


def test_save_for_vllm_points_the_model_at_its_own_checkpoint(tokenizer, tmp_path):
    """TRL's colocated vLLM loads ``model.name_or_path``: after :func:`capstone.save_for_vllm` that is the saved
    checkpoint (with the tag tokens the stage it came from lacks), not the stage."""
    from transformers import AutoConfig
    model, tok = build_model(tokenizer, seed=0), copy.deepcopy(tokenizer)
    capstone.add_tag_tokens(model, tok, TAGS)
    folder = capstone.save_for_vllm(model, tok, tmp_path / "primed")
    assert model.name_or_path == model.config._name_or_path == str(folder)
    assert AutoConfig.from_pretrained(folder).vocab_size == len(tok) == model.get_input_embeddings().weight.shape[0]
