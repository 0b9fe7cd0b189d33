"""Where the course's time goes: each phase of the engine timed against this machine's own roofline.

``make bench`` (``python -m course_tools.bench``) builds the tiny Qwen3 from its config
(random weights, so nothing to download or train and the same work on every machine)
and times, at 1 and 2 threads:

* **matmul**: a 1024² float32 product, the machine's attainable GFLOP/s (the roofline);
* **sampling** 48 new tokens for a batch of prompts, with ``generate`` and with the
  course's engine (:mod:`engine`), also through a LoRA adapter (a GRPO step's sampling),
  and ``generate`` without its KV cache;
* **scoring**: per-token log-probs of given completions (one forward pass);
* **one training step** (forward, backward, AdamW) of each loss the course trains with,
  on the batch its trainer would see: SFT, reward model, DPO, GRPO and our PPO;
* **evaluation** of 300 held-out problems (greedy, what every notebook measures).

Each figure is printed beside what the FLOPs allow at the matmul rate of the same thread
count (``2·N`` FLOPs per token and parameter for a forward pass, ``6·N`` with the backward,
plus attention) and their ratio: near 1 a phase is compute-bound, far above 1 it is
overhead-bound. The JSON written with ``--out`` (``make bench`` writes ``build/bench.json``)
also feeds the budget report (:func:`course_tools.reports.budget_report`).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
from pathlib import Path
from typing import Callable
from unittest import mock

import torch

from course_utils.show import markdown_rows

BATCH = 64              # sequences per phase (a PPO batch, an evaluation chunk)
NEW_TOKENS = 48         # the course's completion budget on the CPU
SEQ_LEN = 88            # prompt (~40) plus completion (48) tokens, as a training batch sees them


def best_of(fn: Callable[[], object], repeats: int = 3, warmup: int = 1) -> float:
    """The fastest of ``repeats`` timed calls, after ``warmup`` untimed ones (seconds)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_gflops(n: int = 1024, repeats: int = 5) -> float:
    """Attainable float32 GFLOP/s at the current thread count: an ``n × n`` matmul, best of ``repeats``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    seconds = best_of(lambda: a @ b, repeats=repeats, warmup=2)
    return 2 * n ** 3 / seconds / 1e9


def forward_flops(config, tokens: int, context: float) -> float:
    """FLOPs of a forward pass over ``tokens`` tokens attending to ``context`` keys on average.

    ``2·N`` per token for the matrix parameters ``N`` (the embedding lookup is free, the
    tied output projection is not) plus ``4·layers·context·heads·head_dim`` for attention.
    """
    h, layers = config.hidden_size, config.num_hidden_layers
    hd = getattr(config, "head_dim", None) or h // config.num_attention_heads
    attn = h * hd * (2 * config.num_attention_heads + 2 * config.num_key_value_heads)
    mlp = 3 * h * config.intermediate_size
    matrix_params = layers * (attn + mlp) + h * config.vocab_size
    return tokens * (2 * matrix_params + 4 * layers * context * config.num_attention_heads * hd)


def _tiny(seed: int = 0):
    from course_utils.modeling import build_model, train_tokenizer
    tokenizer = train_tokenizer()
    return build_model(tokenizer, seed=seed).eval(), tokenizer


def _prompts(tokenizer, n: int) -> list[str]:
    from course_utils.chat import chat_prompt
    from course_utils.evaluation import heldout_problems
    return [chat_prompt(tokenizer, p["question"]) for p in heldout_problems("test", 300)[:n]]


def _random_batch(model, rows: int, seq_len: int = SEQ_LEN, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (rows, seq_len), generator=g)
    mask = torch.ones_like(ids)
    completion = torch.zeros_like(ids)
    completion[:, seq_len - NEW_TOKENS:] = 1
    return ids, mask, completion


def _train_step(model, loss_fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """One forward + backward + AdamW step of ``loss_fn`` (a closure over the batch)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)

    def step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_fn().backward()
        optimizer.step()
    return step


def train_phases(model) -> dict[str, tuple[Callable[[], None], float]]:
    """``{name: (one training step, its FLOPs)}`` for each loss the course trains with."""
    from transformers import AutoModelForSequenceClassification

    from course_utils import losses
    from course_utils.ppo import PolicyAndValue

    cfg = model.config
    ids, mask, comp = _random_batch(model, BATCH)
    fwd = forward_flops(cfg, BATCH * SEQ_LEN, SEQ_LEN / 2)
    ref = _tiny(seed=1)[0].requires_grad_(False)
    with torch.no_grad():
        ref_logps = losses.completion_logps(ref, ids, mask, comp)
    labels = ids.masked_fill(comp == 0, -100)

    def sft():
        return losses.sft_loss(model(input_ids=ids, attention_mask=mask).logits, labels)

    head_config = copy.deepcopy(cfg)
    head_config.num_labels, head_config.pad_token_id = 1, 0
    reward_model = AutoModelForSequenceClassification.from_config(head_config)
    half = BATCH // 2

    def reward():
        scores = reward_model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
        return losses.bradley_terry_loss(scores[:half], scores[half:])

    def dpo():   # chosen and rejected in one forward pass, the reference's log-probs precomputed
        logps = losses.completion_logps(model, ids, mask, comp).sum(1)
        return losses.dpo_loss(logps[:half], logps[half:], ref_logps[:half].sum(1), ref_logps[half:].sum(1),
                               beta=0.1)[0].mean()

    advantages = torch.randn(BATCH)

    def grpo():
        logps = losses.completion_logps(model, ids, mask, comp)
        return losses.grpo_loss(logps, None, ref_logps, advantages, comp, beta=0.04, loss_type="dapo")

    value_model = AutoModelForSequenceClassification.from_config(head_config)
    both = PolicyAndValue(model, value_model)
    returns = torch.randn(BATCH, SEQ_LEN)

    def ppo():   # one minibatch of the clipped policy loss plus the clipped value loss
        logits, values = both(ids, mask)
        logps = losses.selective_log_softmax(logits[:, :-1].float(), ids[:, 1:])
        m = comp[:, 1:].float()
        pg, _ = losses.ppo_policy_loss(logps, ref_logps[:, 1:], returns[:, 1:], m, 0.2)
        vf, _ = losses.ppo_value_loss(values[:, 1:], values[:, 1:].detach(), returns[:, 1:], m, 0.2)
        return pg + 0.1 * vf

    return {
        "train step: SFT": (_train_step(model, sft), 3 * fwd),
        "train step: reward model": (_train_step(reward_model, reward), 3 * fwd),
        "train step: DPO": (_train_step(model, dpo), 3 * fwd),
        "train step: GRPO": (_train_step(model, grpo), 3 * fwd),
        "train step: PPO (policy + critic)": (_train_step(both, ppo), 6 * fwd),
    }


def run_bench(threads: int, repeats: int = 3) -> list[dict]:
    """Every phase at ``threads`` threads: seconds, FLOPs, roofline seconds and their ratio."""
    from course_utils import engine
    from course_utils.evaluation import evaluate_arithmetic
    from course_utils.generation import eval_mode, sample_completions
    from course_utils.losses import completion_logps

    torch.set_num_threads(threads)
    gflops = matmul_gflops()
    model, tokenizer = _tiny()
    cfg = model.config
    prompts = _prompts(tokenizer, 256)
    rows = [{"phase": "matmul 1024² float32", "seconds": 2 * 1024 ** 3 / gflops / 1e9, "flops": 2 * 1024 ** 3,
             "work": f"{gflops:.1f} GFLOP/s"}]

    def sampling(n: int, use_engine: bool, use_cache: bool = True):
        def run():
            torch.manual_seed(0)
            if use_cache:
                return sample_completions(model, tokenizer, prompts[:n], temperature=1.0,
                                          max_new_tokens=NEW_TOKENS, batch_size=n, use_engine=use_engine)
            with eval_mode(model, tokenizer, padding_side="left"):
                enc = tokenizer(prompts[:n], return_tensors="pt", padding=True, add_special_tokens=False)
                return model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=True, top_k=0, top_p=1.0,
                                      use_cache=False, pad_token_id=tokenizer.pad_token_id)
        return run

    prompt_len = 40
    for n in (16, 64, 256):
        # prefill over the prompts, then one token per row and step over a growing context
        flops = forward_flops(cfg, n * prompt_len, prompt_len / 2) + forward_flops(
            cfg, n * NEW_TOKENS, prompt_len + NEW_TOKENS / 2)
        for use_engine in (False, True):
            name = f"sample {n} x {NEW_TOKENS} tokens, " + ("course engine" if use_engine else "HF generate")
            rows.append({"phase": name, "seconds": best_of(sampling(n, use_engine), repeats), "flops": flops,
                         "work": f"{n * NEW_TOKENS} tokens"})
    # what GRPOTrainer samples with: 32 rows through a rank-16 LoRA adapter on every linear layer (the engine
    # folds each adapter into one weight; generate calls base, A and B separately)
    from peft import LoraConfig, get_peft_model
    lora_model = get_peft_model(copy.deepcopy(model), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                                 init_lora_weights=False))
    n = BATCH // 2
    flops = forward_flops(cfg, n * prompt_len, prompt_len / 2) + forward_flops(cfg, n * NEW_TOKENS,
                                                                             prompt_len + NEW_TOKENS / 2)
    for use_engine in (False, True):
        def run_lora(use_engine=use_engine):
            torch.manual_seed(0)
            return sample_completions(lora_model, tokenizer, prompts[:n], temperature=1.0, max_new_tokens=NEW_TOKENS,
                                      batch_size=n, use_engine=use_engine)
        rows.append({"phase": f"sample {n} x {NEW_TOKENS} tokens through a LoRA adapter, "
                              + ("course engine" if use_engine else "HF generate"),
                     "seconds": best_of(run_lora, repeats), "flops": flops, "work": f"{n * NEW_TOKENS} tokens"})
    no_cache = sum(forward_flops(cfg, BATCH * (prompt_len + t), (prompt_len + t) / 2) for t in range(NEW_TOKENS))
    rows.append({"phase": f"sample {BATCH} x {NEW_TOKENS} tokens, HF generate without KV cache",
                 "seconds": best_of(sampling(BATCH, False, use_cache=False), 1), "flops": no_cache,
                 "work": f"{BATCH * NEW_TOKENS} tokens"})
    ids, mask, comp = _random_batch(model, BATCH)
    with torch.no_grad():
        rows.append({"phase": f"score {BATCH} x {SEQ_LEN} tokens (log-probs, forward only)",
                     "seconds": best_of(lambda: completion_logps(model, ids, mask, comp), repeats),
                     "flops": forward_flops(cfg, BATCH * SEQ_LEN, SEQ_LEN / 2), "work": f"{BATCH * SEQ_LEN} tokens"})
    for name, (step, flops) in train_phases(model).items():
        rows.append({"phase": f"{name}, {BATCH} x {SEQ_LEN}", "seconds": best_of(step, repeats), "flops": flops,
                     "work": f"{BATCH * SEQ_LEN} tokens"})
    model.eval()
    eval_flops = forward_flops(cfg, 300 * prompt_len, prompt_len / 2) + forward_flops(
        cfg, 300 * NEW_TOKENS, prompt_len + NEW_TOKENS / 2)
    for use_engine in (False, True):
        with mock.patch.dict(os.environ, {engine.ENV_SWITCH: "1" if use_engine else "0"}):
            seconds = best_of(lambda: evaluate_arithmetic(model, tokenizer, n=300, max_new_tokens=NEW_TOKENS), 1)
        rows.append({"phase": "evaluate 300 problems (greedy), " + ("course engine" if use_engine else "HF generate"),
                     "seconds": seconds, "flops": eval_flops, "work": "300 x 48 tokens"})
    for row in rows:
        row["threads"] = threads
        row["roofline_seconds"] = row["flops"] / (gflops * 1e9)
        row["ratio"] = row["seconds"] / row["roofline_seconds"]
    return rows


def machine() -> dict:
    """What the figures were measured on: CPU model, vector extensions, cores, torch."""
    flags, model = set(), platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "other"
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}


def markdown(rows: list[dict], info: dict) -> str:
    """The bench as a Markdown table, one row per phase and thread count."""
    table = markdown_rows(("phase", "threads", "seconds", "roofline s", "ratio"),
                          [(str(r["phase"]), str(r["threads"]), f"{r['seconds']:.3f}", f"{r['roofline_seconds']:.3f}",
                            f"{r['ratio']:.1f}x") for r in rows])
    return f"Machine: {info['cpu']} ({info['isa']}), {info['cores']} cores; torch {info['torch']}.\n\n{table}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write the rows and the machine as JSON here")
    args = parser.parse_args(argv)
    info, rows = machine(), []
    for threads in args.threads:
        rows += run_bench(threads, args.repeats)
    print(markdown(rows, info))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        gflops = {r["threads"]: r["flops"] / r["seconds"] / 1e9 for r in rows if r["phase"].startswith("matmul")}
        out.write_text(json.dumps({"machine": info, "matmul_gflops": gflops, "rows": rows}, indent=2) + "\n",
                       encoding="utf-8")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
