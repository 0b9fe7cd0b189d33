"""Knowledge distillation (notebook 09): the student, the teacher's answers as data, how sure
the teacher is (:func:`answer_confidence`, the "dark knowledge" there is to pass on), and
intermediate-layer matching.

Logit distillation runs through TRL's ``GKDTrainer`` (``training.gkd_trainer``), on-policy distillation through
its stable ``DistillationTrainer`` (``training.distillation_trainer``; :func:`onpolicy_token_signal` is what the
teacher tells the student about each token it wrote) and sequence-level distillation through TRL's ``SFTTrainer``
(``training.sft_trainer``).
Matching hidden states has no TRL trainer, so :func:`train_hidden_matching` is a plain
PyTorch loop: the same cross-entropy on the teacher's answers, plus
``losses.hidden_state_loss`` on chosen layers.
"""
from __future__ import annotations

import math
import time

import torch
from torch import nn
from transformers import get_cosine_schedule_with_warmup

from .data import to_messages
from .chat import chat_prompt, encode_chat
from .generation import generate
from .losses import generalized_jsd, hidden_state_loss, masked_mean, selective_log_softmax, sft_loss
from .modeling import build_model
from .rewards import is_correct

STUDENT_SHAPE = dict(hidden_size=48, layers=2, heads=2, kv_heads=1, intermediate_size=128)
"""The student's Qwen3 sizes: 79,632 parameters with the course tokenizer, 17% of the 463,776-parameter teacher."""


def build_student(tokenizer, seed: int, **shape) -> torch.nn.Module:
    """A freshly initialised student Qwen3 on the teacher's tokenizer (:data:`STUDENT_SHAPE` unless overridden)."""
    return build_model(tokenizer, seed=seed, **{**STUDENT_SHAPE, **shape})


def teacher_rows(teacher, tokenizer, problems: list[dict], max_new_tokens: int = 48, temperature: float = 0.0,
                 batch_size: int = 200) -> tuple[list[dict], dict]:
    """The teacher answers each problem's question; its answers become ``{"messages"}`` SFT rows.

    Only ``problem["question"]`` goes into the rows: the teacher's text is the only
    supervision. ``stats`` compares the answers with the problems' reference fields
    where they exist, for the reader only: ``teacher_correct`` (share whose answer is
    right) and ``identical_to_reference`` (share equal, character for character, to the
    data set's reference working).
    """
    if not problems:
        raise ValueError("teacher_rows needs at least one problem")
    questions = [p["question"] for p in problems]
    answers = generate(teacher, tokenizer, [chat_prompt(tokenizer, q) for q in questions],
                       max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size)
    rows = [{"messages": to_messages(q, a)} for q, a in zip(questions, answers)]
    stats = {"problems": len(problems)}
    if all("answer" in p for p in problems):
        stats["teacher_correct"] = sum(is_correct(a, p["answer"]) for a, p in zip(answers, problems)) / len(problems)
    if all("completion" in p for p in problems):
        stats["identical_to_reference"] = sum(a == p["completion"] for a, p in zip(answers, problems)) / len(problems)
    return rows, stats


def onpolicy_token_signal(student, teacher, batch: dict, temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """What the teacher says about every token the student sampled: on-policy distillation's dense signal.

    ``batch`` holds ``prompt_ids``/``prompt_mask`` (left-padded) and ``completion_ids``/``completion_mask`` (the
    student's samples, right-padded), as TRL's ``DistillationTrainer`` makes it. Both models read the whole sequence
    (positions 0..T-1, as TRL's trainer runs them); at each completion position t, with q the student's and p the
    teacher's next-token distribution at ``temperature``, returns ``(B, C)`` tensors, 0 on padding:

    * ``"reverse_kl"`` — KL(q_t ‖ p_t) over the whole vocabulary (:func:`losses.generalized_jsd`, β = 1): what
      ``DistillationTrainer`` (β = 1) averages over the completion tokens as its loss;
    * ``"log_ratio"`` — log q(o_t) − log p(o_t) for the token o_t actually sampled: a one-sample estimate of that KL
      (its mean over o_t ~ q is the KL). Its negative is a **per-token reward** — high where the teacher agrees with
      the student's choice — which on-policy distillation with a policy-gradient loss uses in place of one reward
      per answer (Thinking Machines, 2025);
    * ``"student_logps"``, ``"teacher_logps"`` — log q(o_t) and log p(o_t).

    No gradient flows (a measurement; the trainer's loss is TRL's).
    """
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    C = batch["completion_ids"].size(1)
    mask = batch["completion_mask"].float()
    with torch.no_grad():
        q_logits = student(input_ids=ids, attention_mask=attention).logits[:, -C - 1:-1].float()
        p_logits = teacher(input_ids=ids, attention_mask=attention).logits[:, -C - 1:-1].float()
    reverse_kl = generalized_jsd(q_logits, p_logits, 1.0, temperature=temperature, reduction="none") * mask
    q_lp = selective_log_softmax(q_logits / temperature, batch["completion_ids"]) * mask
    p_lp = selective_log_softmax(p_logits / temperature, batch["completion_ids"]) * mask
    return {"reverse_kl": reverse_kl, "log_ratio": q_lp - p_lp, "student_logps": q_lp, "teacher_logps": p_lp}


def signal_table(signal: dict[str, torch.Tensor], batch: dict, tokenizer, row: int) -> str:
    """One answer of an :func:`onpolicy_token_signal` batch token by token, as a Markdown table: the token, log q,
    log p, the per-token reverse KL and the one-sample reward −(log q − log p)."""
    from .show import markdown_table
    n = int(batch["completion_mask"][row].sum())
    return markdown_table({
        "token": [tokenizer.decode([t]) for t in batch["completion_ids"][row, :n].tolist()],
        "log q (student)": signal["student_logps"][row, :n].tolist(),
        "log p (teacher)": signal["teacher_logps"][row, :n].tolist(),
        "reverse KL (whole vocabulary)": signal["reverse_kl"][row, :n].tolist(),
        "reward −(log q − log p)": (-signal["log_ratio"][row, :n]).tolist()}, index=range(1, n + 1), index_header="t")


def encode_rows(tokenizer, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``{"messages"}`` rows as right-padded ``(input_ids, attention_mask, labels)``; labels are -100 off the answer.

    The answer is everything the chat template renders after the prompt (the
    end-of-turn tokens included), as TRL's ``assistant_only_loss`` trains it.
    """
    encoded = [encode_chat(tokenizer, row["messages"][:1], row["messages"][1:]) for row in rows]
    width = max(len(ids) for ids, _ in encoded)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (ids, n_prompt) in enumerate(encoded):
        ids = torch.tensor(ids)
        input_ids[i, :len(ids)] = ids
        attention[i, :len(ids)] = 1
        labels[i, n_prompt:len(ids)] = ids[n_prompt:]
    return input_ids, attention, labels


def answer_confidence(logits: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0) -> dict[str, float]:
    """How sure a model is of the next token at the answer positions, at ``temperature``.

    ``logits`` (B, T, V) are a model's outputs on a batch of chats and ``mask`` (B, T - 1) marks the positions whose
    *next* token is an answer token (``labels[:, 1:] != -100``). With :math:`p^T = \\mathrm{softmax}(z / T)` at each
    such position, returns the means over them of the entropy :math:`-\\sum_v p^T_v \\log p^T_v` (nats; a uniform
    guess over V tokens has :math:`\\log V`) and of the top-1 probability :math:`\\max_v p^T_v`:
    ``{"entropy", "top1"}``. Little entropy means little "dark knowledge" for a student to learn beyond the argmax.
    """
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, -1)     # (B, T-1, V)
    entropy = -(logp.exp() * logp).sum(-1)                                # (B, T-1)
    top1 = logp.exp().amax(-1)                                            # (B, T-1)
    return {"entropy": float(masked_mean(entropy, mask)), "top1": float(masked_mean(top1, mask))}


def uniform_layer_map(student, teacher) -> dict[int, int]:
    """Each student layer ``s`` (1..S) matched to teacher layer ``ceil(s * T / S)``: evenly spaced, the last to the
    last (the course's 2-layer student and 4-layer teacher: ``{1: 2, 2: 4}``). Hidden-state indices as
    ``output_hidden_states`` counts them (0 is the embedding output)."""
    s_layers, t_layers = student.config.num_hidden_layers, teacher.config.num_hidden_layers
    return {s: math.ceil(s * t_layers / s_layers) for s in range(1, s_layers + 1)}


def train_hidden_matching(student, teacher, tokenizer, rows: list[dict], steps: int, learning_rate: float,
                          hidden_weight: float, layer_map: dict[int, int] | None = None, batch_size: int = 32,
                          seed: int = 0) -> dict:
    """Train ``student`` on ``rows`` (cross-entropy on the answers) plus matched hidden states.

    Loss per batch: ``sft_loss + hidden_weight * mean over layer_map of hidden_state_loss``,
    where ``layer_map`` maps a student layer to a teacher layer (hidden-state indices as
    ``output_hidden_states`` counts them: 0 is the embedding output) and a learned linear
    map lifts each student state to the teacher's width. ``hidden_weight=0`` is plain SFT
    in the same loop, the baseline to compare with. AdamW, 5% warm-up, cosine decay,
    batches drawn with ``seed``. Returns ``{"loss", "hidden_loss", "seconds", "projections"}``
    (per-step lists; the trained projections).
    """
    s_layers, t_layers = student.config.num_hidden_layers, teacher.config.num_hidden_layers
    layer_map = layer_map or {s_layers: t_layers}
    for s, t in layer_map.items():
        if not (0 <= s <= s_layers and 0 <= t <= t_layers):
            raise ValueError(f"layer pair {s}->{t} outside 0..{s_layers} (student) / 0..{t_layers} (teacher)")
    projections = nn.ModuleDict({str(s): nn.Linear(student.config.hidden_size, teacher.config.hidden_size, bias=False)
                                 for s in layer_map})
    input_ids, attention, labels = encode_rows(tokenizer, rows)
    params = list(student.parameters()) + list(projections.parameters())
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    schedule = get_cosine_schedule_with_warmup(optimizer, max(1, steps // 20), steps)   # as the TRL runs use
    generator = torch.Generator().manual_seed(seed)
    teacher.eval()
    student.train()
    history = {"loss": [], "hidden_loss": []}
    start = time.time()
    for _ in range(steps):
        idx = torch.randint(0, len(rows), (batch_size,), generator=generator)
        width = int(attention[idx].sum(1).max())
        ids, mask, lab = input_ids[idx, :width], attention[idx, :width], labels[idx, :width]
        out = student(input_ids=ids, attention_mask=mask, output_hidden_states=hidden_weight > 0)
        ce = sft_loss(out.logits, lab)
        loss, hidden = ce, torch.zeros(())
        if hidden_weight > 0:
            with torch.no_grad():
                t_states = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
            hidden = torch.stack([hidden_state_loss(projections[str(s)](out.hidden_states[s]), t_states[t], mask)
                                  for s, t in layer_map.items()]).mean()
            loss = ce + hidden_weight * hidden
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        history["loss"].append(float(ce.detach()))
        history["hidden_loss"].append(float(hidden.detach()))
    student.eval()
    return {**history, "seconds": time.time() - start, "projections": projections}
