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
  recompute it with :func:`course_utils.losses.dpo_loss`;
* :func:`evaluate_policy` — the notebook's one measurement of a policy (a :class:`PolicyEval`: the answers, as
  :func:`experiment.evaluate` measures them, plus the implicit reward's preference accuracy and the KL to the
  reference), and :func:`sampled_failures` — the failure breakdown of sampled answers; both take the test size and
  the generation budget from the profile only;
* :func:`fraction_table` — counts and fractions (pair statistics, failure rates) as a Markdown table.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import torch

from .chat import chat_prompt, encode_chat
from .data import to_messages
from .evaluation import failure_breakdown, heldout_problems, kl_to_reference
from .experiment import Eval, evaluate
from .show import markdown_table
from .generation import eval_mode, sample_completions
from .losses import completion_logps, dpo_loss, ipo_loss
from .run_config import seed_everything
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

    A policy that is never right (a weak model of your own) gives no pair at all: then each problem's
    reference demonstration (its ``"completion"``, where it has one) is *chosen* against the policy's first
    wrong answer, and ``stats["reference_pairs"]`` counts those pairs (0 whenever the policy made a pair).

    Returns ``(rows, stats)``: rows as :func:`pair_row` dicts, and
    ``{"problems", "samples", "sample_accuracy", "pairs", "all_right", "all_wrong", "reference_pairs"}``
    (``all_right`` and ``all_wrong`` are fractions of the problems).
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
    if not rows and n_right == 0:
        rows = [pair_row(p["question"], p["completion"], out.texts[i * samples_per_prompt])
                for i, p in enumerate(problems) if "completion" in p]
    n = len(problems)
    stats = {"problems": n, "samples": n * samples_per_prompt, "sample_accuracy": n_right / (n * samples_per_prompt),
             "pairs": len(rows), "all_right": all_right / n, "all_wrong": all_wrong / n,
             "reference_pairs": len(rows) if n_right == 0 else 0}
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


# --------------------------------------------------------------------------- measuring a policy (notebook 06)
@dataclass(frozen=True)
class PolicyEval(Eval):
    """An :class:`experiment.Eval` of a policy trained on preference pairs, with what DPO's notebook measures beside
    its answers.

    ``pref_accuracy``: the share of held-out self-generated pairs whose implicit reward ranks the chosen answer
    first (:func:`implicit_reward_accuracy`; a tie counts one half); ``offline_pref_accuracy``: the same on 03's
    held-out offline pairs (None where not measured); ``kl``: KL(pi || pi_ref) in nats per answer, on the policy's own
    samples at temperature 1 (:func:`evaluation.kl_to_reference`). ``summary()`` includes all three, so
    ``runs.add(name, ev)`` logs them with the greedy figures.
    """

    pref_accuracy: float | None = None
    offline_pref_accuracy: float | None = None
    kl: float | None = None


def evaluate_policy(model, tokenizer, profile, reference, pairs: list[dict], offline_pairs: list[dict] | None = None,
                    *, reference_free: bool = False) -> PolicyEval:
    """Measure a policy on held-out data: greedy answers (:func:`experiment.evaluate`: ``profile.eval_size``
    problems, ``profile.max_new_tokens`` new tokens), the preference accuracy of its implicit reward on ``pairs``
    (and on ``offline_pairs`` if given), and its KL to ``reference`` (the same size and budget, from the profile).

    The implicit reward is DPO's and IPO's, ``log pi - log pi_ref`` against ``reference``; with
    ``reference_free=True`` it is SimPO's length-normalised ``log pi`` (the KL is still measured against
    ``reference``, to show how far a reference-free method drifts). The order of the measurements is fixed (greedy,
    pairs, offline pairs, then the KL, the only one that samples), so a run's figures do not depend on which were
    asked for before the KL.
    """
    ev = evaluate(model, tokenizer, profile)
    implicit = None if reference_free else reference
    pref = implicit_reward_accuracy(model, tokenizer, pairs, reference=implicit)["accuracy"]
    offline = (None if offline_pairs is None else
               implicit_reward_accuracy(model, tokenizer, offline_pairs, reference=implicit)["accuracy"])
    kl = kl_to_reference(model, reference, tokenizer, n=profile.eval_size, max_new_tokens=profile.max_new_tokens)["kl"]
    return PolicyEval(**{f.name: getattr(ev, f.name) for f in fields(ev)}, pref_accuracy=pref,
                      offline_pref_accuracy=offline, kl=kl)


@torch.no_grad()
def sampled_failures(model, tokenizer, profile, num_samples: int = 2, temperature: float = 1.0) -> dict:
    """The failure breakdown (:func:`evaluation.failure_breakdown`: fractions per kind) of ``num_samples`` answers
    per held-out problem sampled at ``temperature``: ``profile.eval_size`` problems, ``profile.max_new_tokens`` new
    tokens, the RNG seeded with ``profile.seed`` first (so two models are compared on the same random draws)."""
    problems = heldout_problems("test", profile.eval_size)
    seed_everything(profile.seed)
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    out = sample_completions(model, tokenizer, prompts, num_samples=num_samples, temperature=temperature,
                             max_new_tokens=profile.max_new_tokens)
    return failure_breakdown(out.texts, [p["answer"] for p in problems for _ in range(num_samples)])


def fraction_table(rows: Mapping[str, Mapping[str, float]], columns: Mapping[str, str], first: str = "") -> str:
    """A Markdown table: one row per entry of ``rows`` (its name first), ``columns`` ``{key: header}``.

    Integers print as counts (``3,000``), other numbers as percentages (``12.5%``): for figures that are counts or
    fractions, such as :func:`self_generated_pairs`' statistics or :func:`evaluation.failure_breakdown`'s rates.
    """
    def cell(value):
        return f"{value:,}" if isinstance(value, int) else f"{value:.1%}"
    return markdown_table({header: [cell(row[key]) for row in rows.values()] for key, header in columns.items()},
                          index=list(rows), index_header=first)
