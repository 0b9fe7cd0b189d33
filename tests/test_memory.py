"""course_utils.memory: exact parameter counts, the bytes of each term measured on a tiny Qwen3 on the CPU (saved
tensors for the activations, peak resident memory for a whole step and for each logits code path), the table, and
scripts/gpu_memory_check.py's --tiny path end to end."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from course_utils import memory

ROOT = Path(__file__).resolve().parents[1]
GIB = 2 ** 30


def tiny_config(**overrides):
    kwargs = dict(vocab_size=300, hidden_size=96, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=24, tie_word_embeddings=True, max_position_embeddings=512)
    kwargs.update(overrides)
    return Qwen3Config(**kwargs)


# --------------------------------------------------------------------------- parameters and bytes per parameter
def test_parameter_counts_of_the_three_qwen3_configs():
    """Counted on the meta device from the sizes in memory.QWEN3_SIZES; the model cards give the non-embedding
    parameters as 0.44B, 1.4B and 3.6B."""
    counts = {m: memory.parameter_count(memory.qwen3_config(m)) for m in memory.MODELS}
    assert counts == {"Qwen/Qwen3-0.6B": 596_049_920, "Qwen/Qwen3-1.7B": 1_720_574_976,
                      "Qwen/Qwen3-4B": 4_022_468_096}
    body = {m: round((n - memory.VOCAB_SIZE * memory.QWEN3_SIZES[m]["hidden_size"]) / 1e9, 2)
            for m, n in counts.items()}
    assert body == {"Qwen/Qwen3-0.6B": 0.44, "Qwen/Qwen3-1.7B": 1.41, "Qwen/Qwen3-4B": 3.63}


def test_parameter_count_matches_built_models_and_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3ForSequenceClassification
    config = tiny_config()
    model = Qwen3ForCausalLM(config)
    assert memory.parameter_count(config) == sum(p.numel() for p in model.parameters())
    scorer = Qwen3ForSequenceClassification(Qwen3Config(**{**config.to_dict(), "num_labels": 1}))
    assert memory.parameter_count(config, head="score") == sum(p.numel() for p in scorer.parameters())
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert memory.lora_parameters(config, 8) == sum(p.numel() for p in peft_model.parameters() if p.requires_grad)


@pytest.mark.parametrize("dtype, state_bytes", [(torch.float32, 12), (torch.bfloat16, 6)])
def test_weight_grad_and_adamw_bytes_match_a_real_step(dtype, state_bytes):
    """The weight term equals the bytes of a built model's parameters; after one AdamW step its grads and two moments
    take ``state_bytes`` per parameter: torch keeps the moments in the parameter's dtype (fp32: 4 + 8; bf16, as 02
    and 03 train a bf16 hub model: 2 + 4, no fp32 master weights)."""
    config = tiny_config()
    model = Qwen3ForCausalLM(config).to(dtype)
    n = memory.parameter_count(config)
    copy = memory.Copy("policy", n, torch.finfo(dtype).bits // 8, n, state_bytes)
    assert sum(p.numel() * p.element_size() for p in model.parameters()) == copy.weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, config.vocab_size, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    moments = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim() > 0)
    assert grads + moments == copy.state


def test_logits_bytes_formula():
    assert memory.logits_bytes(16, 1024) == 16 * 1024 * 151_936 * 4
    assert memory.logits_bytes(16, 1024) / GIB == pytest.approx(9.27, abs=0.01)
    assert memory.logits_bytes(2, 10, vocab=100, bytes_per_element=memory.HF_LOSS_BYTES) == 2 * 10 * 100 * 12
    tile = 2 * 4096 * 32768   # TRL's fused head: one bf16 tile, whatever the batch
    config = memory.qwen3_config()
    assert memory.fused_logits_bytes(config, 100_000, False) == tile + 8 * 100_000 * 1024
    assert memory.fused_logits_bytes(config, 10, True) == 2 * 10 * 32768 + 8 * 10 * 1024 + 4 * 151_936 * 1024


# --------------------------------------------------------------------------- activations: saved tensors
def _saved_bytes_per_token(model, batch, seq_len, padded, autocast):
    """Bytes of the tensors autograd saves in one forward of ``model`` (parameters and autocast's bf16 copies of them
    left out), per token; each storage once."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape[::-1]) for p in model.parameters()}
    seen = {}

    def pack(t):
        weight_copy = autocast and t.dtype == torch.bfloat16 and tuple(t.shape) in shapes
        if t.untyped_storage().data_ptr() not in params and not weight_copy:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, 300, (batch, seq_len))
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    if padded:
        mask[0, :5] = 0
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(input_ids=ids, attention_mask=mask)
    return sum(seen.values()) / (batch * seq_len)


@pytest.mark.parametrize("precision", memory.PRECISIONS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("shape", [dict(), dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=8,
                                                 head_dim=32, intermediate_size=512)])
def test_activation_formula_matches_saved_tensors(precision, padded, shape):
    """The per-token formula against the saved tensors of a tiny Qwen3's forward (the backbone: the LM head's input is
    taken off the estimate). Within 5%: every tensor transformers' Qwen3 keeps is counted; fp32 and bf16 match to the
    byte, autocast within ~2% (a few small casts)."""
    torch.manual_seed(0)
    config = tiny_config(**shape)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16 if precision == "bf16" else torch.float32)
    batch, seq_len = 3, 50
    measured = _saved_bytes_per_token(model.model, batch, seq_len, padded, precision == "autocast")
    head_input = config.hidden_size * (4 if precision == "fp32" else 2)
    estimate = memory.activation_bytes_per_token(config, precision, False, seq_len, padded, batch=batch) - head_input
    assert estimate == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("precision", memory.PRECISIONS)
def test_lora_activation_formula_matches_saved_tensors(precision):
    """With a LoRA adapter on a frozen base the normalised tensors are not kept, the adapters' inputs are. Within 8%:
    the estimate also counts tensors of the first layer and the final norm that a frozen embedding and head need no
    gradient for (an upper bound)."""
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    config = tiny_config()
    base = Qwen3ForCausalLM(config).to(torch.bfloat16 if precision == "bf16" else torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    measured = _saved_bytes_per_token(model.base_model.model.model, 3, 50, True, precision != "fp32")
    estimate = memory.activation_bytes_per_token(config, precision, False, 50, True, lora_r=8, batch=3) \
        - config.hidden_size * (4 if precision == "fp32" else 2)
    assert 1.0 <= estimate / measured <= 1.08


# --------------------------------------------------------------------------- whole steps and logits: peak memory
PEAK_PROBE = r'''
import gc, json, os, re, sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.loss.loss_utils import ForCausalLMLoss
from course_utils import losses, memory
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
from trl.experimental.gkd import GKDTrainer

def status(key):
    return int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1)) * 1024

def peak(fn):
    """Peak resident bytes of fn() above what was resident before (glibc returns each freed tensor: see the env)."""
    fn()                                            # warm up (lazy inits, thread pools)
    gc.collect(); base = status("VmRSS"); open("/proc/self/clear_refs", "w").write("5")
    fn()
    return status("VmHWM") - base

torch.manual_seed(0)
out = {}
config = Qwen3Config(vocab_size=600, hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, max_position_embeddings=512)
B, T = 8, 256
for ckpt in (False, True):
    model = Qwen3ForCausalLM(config); model.train()
    if ckpt:
        model.config.use_cache = False
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(0, 600, (B, T)); mask = torch.ones(B, T, dtype=torch.long); mask[0, :7] = 0
    def step():
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
        model.zero_grad(set_to_none=False)          # keep the grads allocated: counted like the estimate's static
    phase = memory._update("update", config, "fp32", ckpt, B, T, memory.logits_bytes(B, T, 600, memory.HF_LOSS_BYTES))
    out[f"step ckpt={ckpt}"] = (peak(step), phase.total)    # the grads stay allocated: in the baseline

V, h, B, P, C = 151936, 64, 4, 8, 40
W = torch.randn(V, h) * 0.02
def ppo_forward(grad):
    hidden = torch.randn(B, P + C, h, requires_grad=grad)
    logits = hidden @ W.T
    z = logits[:, P - 1:-1].float() / 0.7
    del logits
    logps = losses.selective_log_softmax(z, torch.randint(0, V, (B, C)))
    entropy = losses.entropy_from_logits(z)
    return logps, entropy
def ppo_update():
    logps, entropy = ppo_forward(True)
    m = torch.ones(B, C)
    loss, _ = losses.ppo_policy_loss(logps, logps.detach() + 0.01, torch.randn(B, C), m, 0.2)
    (loss - 0.0 * losses.masked_mean(entropy, m)).backward()
def ppo_scoring():
    with torch.no_grad():
        ppo_forward(False)
def reference():
    with torch.no_grad():
        logits = (torch.randn(B, P + C, h) @ W.T)[:, :-1]
        losses.selective_log_softmax(logits.float() / 0.7, torch.randint(0, V, (B, P + C - 1)))
def hf_loss():
    hidden = torch.randn(B, P + C, h, dtype=torch.bfloat16, requires_grad=True)
    ForCausalLMLoss(hidden @ W.bfloat16().T, torch.randint(0, V, (B, P + C)), V).backward()
def gkd():
    hidden = torch.randn(B, P + C, h, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        student = hidden @ W.T
        with torch.no_grad():
            teacher = torch.randn(B, P + C, h) @ W.T
        loss = GKDTrainer.generalized_jsd_loss(student[:, :-1], teacher[:, :-1],
                                               torch.randint(0, V, (B, P + C - 1)), beta=0.0)
    del student, teacher
    loss.backward()
for name, fn, n_elements, per in [("ppo update", ppo_update, B * C * V, memory.PPO_UPDATE_BYTES),
                                  ("ppo scoring", ppo_scoring, B * C * V, memory.PPO_SCORING_BYTES),
                                  ("reference", reference, B * (P + C) * V, memory.REFERENCE_BYTES),
                                  ("hf loss", hf_loss, B * (P + C) * V, memory.HF_LOSS_BYTES),
                                  ("gkd", gkd, B * (P + C) * V, memory.GKD_BYTES)]:
    out[name] = (peak(fn), n_elements * per)
print(json.dumps(out))
'''


def _can_reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _can_reset_peak_rss(), reason="needs Linux's /proc/self/clear_refs to reset the peak RSS")
def test_step_and_logits_estimates_match_peak_memory():
    """Peak resident memory on the CPU (glibc told to return every freed block, so the peak is the live bytes'):

    * a whole training step of a tiny Qwen3 (activations and HF-loss logits; the grads stay allocated between steps,
      as in the estimate's static part), with and without gradient checkpointing, within 10% (the checkpointed peak
      is the rebuilt layer's backward, which the estimate sizes from above);
    * each logits code path at V = 151,936 within 10% of its bytes-per-element constant.
    """
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "2"}
    run = subprocess.run([sys.executable, "-c", PEAK_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    ratios = {name: estimate / measured for name, (measured, estimate) in results.items()}
    assert all(0.9 <= r <= 1.1 for r in ratios.values()), ratios


# --------------------------------------------------------------------------- the notebooks' estimates
def test_estimates_follow_the_notebooks_recipes_and_copies():
    n = 596_049_920
    n_score = memory.parameter_count(memory.qwen3_config(), head="score")
    ppo = memory.estimate("05")
    assert ppo.settings == {"prompt_tokens": 64, "rollouts": 32, "minibatch": 8, "seq_len": 320, "completion": 256}
    assert ppo.static == n * (16 + 4) + n_score * (16 + 2)   # fp32 policy and critic trained, fp32 ref, bf16 RM
    assert [p.name for p in ppo.phases] == ["rollout: generation", "rollout: scoring", "update"]
    grpo = memory.estimate("07")
    lora = memory.lora_parameters(memory.qwen3_config(), 16)
    assert grpo.static == 4 * n + 16 * lora                    # one fp32 base: the reference is the adapter off
    assert grpo.phases[0].kv_cache == 64 * (64 + 512) * 2 * 28 * 8 * 128 * 4
    dpo = memory.estimate("06", "Qwen/Qwen3-4B")
    assert dpo.static == 4_022_468_096 * (16 + 4)
    assert dpo.peak == dpo.static + max(p.total for p in dpo.phases)
    sft = memory.estimate("02")
    assert sft.phases[0].logits == 16 * 1024 * 151_936 * memory.HF_LOSS_BYTES
    for key in memory.NOTEBOOKS:   # a bigger model never needs less
        peaks = [memory.estimate(key, m).peak for m in memory.MODELS]
        assert peaks == sorted(peaks), key


def test_table_has_a_row_per_notebook_and_model():
    text = memory.table(notebooks=["05", "07"])
    lines = text.splitlines()
    assert lines[0].startswith("| notebook | model | parameters |") and len(lines) == 2 + 2 * 3
    assert "| 05_ppo | Qwen3-4B | 4.02 B |" in text
    rows = memory.rows(notebooks=["09"])
    assert [r["model"] for r in rows] == ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B"]
    with pytest.raises(ValueError, match="no memory model"):
        memory.estimate("04")


# --------------------------------------------------------------------------- the GPU script, on the CPU
def test_gpu_memory_check_tiny_runs_end_to_end(tmp_path):
    """scripts/gpu_memory_check.py --tiny: 05's PPO, 06's DPO and 07's GRPO for a few steps on a tiny Qwen3 on the CPU,
    through the same code as on the GPU; it must finish within 60 s and write every figure."""
    out = tmp_path / "check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_memory_check.py"), "--tiny", "--out", str(out),
                          "--ppo-steps", "2", "--dpo-steps", "2", "--grpo-steps", "2"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    assert run.returncode == 0, run.stderr[-3000:]
    assert seconds < 60, seconds
    record = json.loads(out.read_text())
    assert set(record["notebooks"]) == {"05", "06", "07"}
    for key, result in record["notebooks"].items():
        assert "error" not in result, result
        assert len(result["step_seconds"]) == 2 and result["tokens_per_second"] > 0, key
        assert result["estimate_gib"] > result["estimate_static_gib"] > 0, key
    assert record["notebooks"]["05"]["recipe"]["learning_rate"] == 1e-6          # the gpu profile's recipe
    assert record["notebooks"]["06"]["tokens_per_step"] == [2 * 2 * 48] * 2      # pairs long enough for max_length


def test_vllm_standby_share_is_unsloths_rule_by_card_size():
    # unsloth-zoo 2026.10.9 replaces gpu_memory_utilization by this in standby mode (notebook 11's default)
    gib = 1024 ** 3
    for total, share in ((141, 0.925), (80, 0.925), (40, 0.925), (24, 0.825), (16e9 / gib, 0.8), (12, 0.775),
                         (8, 0.75)):
        assert memory.vllm_standby_share(total) == pytest.approx(share * 0.95), total
    assert "vllm_standby_share" in memory.estimate("11").note and "0.6" not in memory.estimate("11").note
