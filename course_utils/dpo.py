"""Preference optimisation (notebook 06): the pairs DPO learns from and the measurements around it.

TRL's ``DPOTrainer`` does the training (built in :mod:`course_utils.training`); this
module holds what the trainer does not:

* :func:`self_generated_pairs` — rejection-sampling pairs: sample several answers per
  prompt from the policy, label them with the verifier, pair a right one with a wrong one;
* :func:`pair_logps` — sequence log-probabilities of both answers of each pair, tokenised
  as TRL tokenises a conversational pair (the chat template of prompt + answer);
* :func:`implicit_reward_accuracy` — how often DPO's implicit reward
  ``beta * log(pi / pi_ref)`` (or SimPO's length-normalised ``log pi``) ranks the chosen
  answer first on held-out pairs;
* :func:`trl_loss_parity` — drive ``DPOTrainer``'s own loss on one of its batches and
  recompute it with :func:`course_utils.losses.dpo_loss`.
"""
from __future__ import annotations

import torch

from .data import to_messages
from .chat import chat_prompt, encode_chat
from .generation import eval_mode, sample_completions
from .losses import completion_logps, dpo_loss, ipo_loss
from .rewards import is_correct


def pair_row(question: str, chosen: str, rejected: str) -> dict:
    """One conversational preference pair in TRL's format (the format of :func:`data.preference_rows`)."""
    return {"prompt": to_messages(question),
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}]}


@torch.no_grad()
def self_generated_pairs(model, tokenizer, problems: list[dict], samples_per_prompt: int = 4,
                         temperature: float = 0.7, max_new_tokens: int = 48, batch_size: int = 256,
                         progress: bool = False) -> tuple[list[dict], dict]:
    """Rejection-sampling preference pairs from the model's own answers.

    For each problem (``{"question", "answer"}``) sample ``samples_per_prompt`` answers,
    label each with the verifier (:func:`rewards.is_correct`), and if at least one is
    right and one is wrong keep one pair: the first right answer as *chosen*, the first
    wrong one as *rejected*. Problems whose answers are all right or all wrong teach
    nothing by contrast and give no pair.

    Returns ``(rows, stats)``: rows as :func:`pair_row` dicts, and
    ``{"problems", "samples", "sample_accuracy", "pairs", "all_right", "all_wrong"}``
    (the last two are fractions of the problems).
    """
    if samples_per_prompt < 2:
        raise ValueError("need at least 2 samples per prompt to form a pair")
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    out = sample_completions(model, tokenizer, prompts, num_samples=samples_per_prompt, temperature=temperature,
                             max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
    rows, n_right, all_right, all_wrong = [], 0, 0, 0
    for i, problem in enumerate(problems):
        texts = out.texts[i * samples_per_prompt:(i + 1) * samples_per_prompt]
        right = [t for t in texts if is_correct(t, problem["answer"])]
        wrong = [t for t in texts if not is_correct(t, problem["answer"])]
        n_right += len(right)
        all_right += not wrong
        all_wrong += not right
        if right and wrong:
            rows.append(pair_row(problem["question"], right[0], wrong[0]))
    n = len(problems)
    stats = {"problems": n, "samples": n * samples_per_prompt, "sample_accuracy": n_right / (n * samples_per_prompt),
             "pairs": len(rows), "all_right": all_right / n, "all_wrong": all_wrong / n}
    return rows, stats


@torch.no_grad()
def pair_logps(model, tokenizer, rows: list[dict], average: bool = False,
               batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence log-probabilities ``(chosen, rejected)``, each ``(N,)``, of the pairs in ``rows``.

    ``log pi(y | x)`` is the sum over the answer's tokens (the chat template's end-of-turn
    tokens included, as TRL counts them); with ``average=True`` it is divided by the
    number of those tokens (SimPO's length-normalised score).
    """
    sequences = []
    for row in rows:
        for key in ("chosen", "rejected"):
            sequences.append(encode_chat(tokenizer, row["prompt"], row[key]))
    values = []
    with eval_mode(model):
        device = next(model.parameters()).device
        for start in range(0, len(sequences), batch_size):
            chunk = sequences[start:start + batch_size]
            width = max(len(ids) for ids, _ in chunk)
            input_ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            attention = torch.zeros_like(input_ids)
            completion = torch.zeros_like(input_ids)
            for i, (ids, n_prompt) in enumerate(chunk):   # right padding
                input_ids[i, :len(ids)] = torch.tensor(ids)
                attention[i, :len(ids)] = 1
                completion[i, n_prompt:len(ids)] = 1
            input_ids, attention, completion = input_ids.to(device), attention.to(device), completion.to(device)
            logps = completion_logps(model, input_ids, attention, completion).sum(1)
            if average:
                logps = logps / completion.sum(1).clamp(min=1)
            values.append(logps.float().cpu())
    logps = torch.cat(values)
    return logps[0::2], logps[1::2]


def implicit_reward_accuracy(model, tokenizer, rows: list[dict], reference=None) -> dict:
    """Share of pairs whose implicit reward ranks the chosen answer above the rejected one.

    With a ``reference``: DPO's (and IPO's) reward, ``log pi(y) - log pi_ref(y)`` (the
    positive factor beta does not change the ranking). Without one: SimPO's
    reference-free reward, the length-normalised ``log pi(y)``. A tie counts one half,
    so the policy at the start of DPO (equal to its reference) scores exactly 0.5.
    Returns ``{"accuracy", "margin"}`` (the mean reward gap, chosen minus rejected).
    """
    if not rows:
        raise ValueError("need at least one pair")
    chosen, rejected = pair_logps(model, tokenizer, rows, average=reference is None)
    if reference is not None:
        ref_chosen, ref_rejected = pair_logps(reference, tokenizer, rows)
        chosen, rejected = chosen - ref_chosen, rejected - ref_rejected
    gap = chosen - rejected
    wins = (gap > 0).float() + 0.5 * (gap == 0).float()
    return {"accuracy": wins.mean().item(), "margin": gap.mean().item()}


def trl_loss_parity(trainer, n_pairs: int = 8) -> dict:
    """TRL ``DPOTrainer``'s loss on one of its own batches, and ours on the same tensors.

    Takes the first ``n_pairs`` pairs of the trainer's training data, collates them with
    the trainer's collator (a batch of chosen rows, then rejected rows), and runs
    ``trainer.compute_loss`` — the code a training step runs. Then it recomputes the loss
    from the same ``input_ids`` / ``completion_mask`` with :func:`losses.completion_logps`
    and :func:`losses.dpo_loss` (or :func:`losses.ipo_loss` for ``loss_type="ipo"``, on
    log-ratios averaged over each answer's tokens, as TRL does). Returns
    ``{"trl": loss, "ours": loss}`` (scalar tensors) and the sequence log-probs ours used.
    """
    model, reference = trainer.model, trainer.ref_model
    if reference is None:
        raise ValueError("trl_loss_parity needs a trainer built with an explicit ref_model")
    loss_types = list(trainer.loss_types)
    if loss_types not in (["sigmoid"], ["ipo"]):
        raise ValueError(f"parity is implemented for loss_type sigmoid or ipo, not {loss_types}")
    examples = [trainer.train_dataset[i] for i in range(min(n_pairs, len(trainer.train_dataset)))]
    inputs = trainer._prepare_inputs(trainer.data_collator(examples))
    with torch.no_grad():
        trl_loss = trainer.compute_loss(model, inputs)
        args = (inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"])
        policy = completion_logps(model, *args).sum(1)
        ref = completion_logps(reference, *args).sum(1)
    policy_chosen, policy_rejected = policy.chunk(2)
    ref_chosen, ref_rejected = ref.chunk(2)
    if loss_types == ["sigmoid"]:
        losses, _, _ = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, trainer.beta)
    else:
        n_tokens = inputs["completion_mask"].sum(1).clamp(min=1).chunk(2)
        losses = ipo_loss((policy_chosen - ref_chosen) / n_tokens[0], (policy_rejected - ref_rejected) / n_tokens[1],
                          trainer.beta)
    return {"trl": trl_loss.detach(), "ours": losses.mean(), "policy_chosen": policy_chosen,
            "policy_rejected": policy_rejected, "ref_chosen": ref_chosen, "ref_rejected": ref_rejected}
