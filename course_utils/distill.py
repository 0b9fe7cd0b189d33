"""Knowledge distillation (notebook 09): the student, the teacher's answers as data, how sure
the teacher is (:func:`answer_confidence`, the "dark knowledge" there is to pass on), and
intermediate-layer matching.

Logit distillation runs through TRL's ``GKDTrainer`` (``training.gkd_trainer``) and
sequence-level distillation through TRL's ``SFTTrainer`` (``training.sft_trainer``).
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
from .losses import hidden_state_loss, masked_mean, sft_loss
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
