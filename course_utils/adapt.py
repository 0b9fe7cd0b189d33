"""Adapting any causal language model and its tokenizer to the course's chat format.

The course's own tiny Qwen3 is built for the course: a pad token of its own, a chat template with
``{% generation %}`` marks, the reasoning tags ``<think>``/``</think>``/``<answer>``/``</answer>`` as whole
tokens. A model you bring may have none of these. :func:`adapt` checks each and fixes what it can, in place,
and says what it changed (an :class:`Adaptation`); what it cannot fix raises :class:`AdaptationError`
naming what is missing.

* **A pad token of its own.** Batches are padded, and the pad positions are masked out of the loss and of
  the attention. With ``pad = eos`` (the usual shortcut) every mask built from the pad id (transformers'
  ``DataCollatorForLanguageModeling``, for one) also drops the EOS, so a model trained through it is never
  trained to stop and generates to the budget (TRL's SFT collator masks by position and is not affected). A new
  ``<|pad|>`` token (and one new embedding row) keeps the two apart.
* **A chat template that keeps the tags.** A base model has no template: it gets :data:`PLAIN_CHAT_TEMPLATE`.
  A model's own template is kept when it renders the course's tagged answer intact, renders the prompt as a
  prefix of the whole chat, ends the answer with EOS and marks the assistant's tokens with
  ``{% generation %}`` (what ``assistant_only_loss`` trains on; TRL's training variant of a known template is
  used where TRL has one). A template that drops ``<think>`` blocks (Qwen3's does, for earlier turns) or
  fails another test is replaced by the plain one, and the reason is recorded.
* **Tags as whole tokens.** A tokenizer that splits ``<answer>`` into ``<``, ``answer``, ``>`` makes the format
  several tokens long for a model that has never seen it; each tag becomes one ordinary (not special) token,
  since TRL decodes completions with ``skip_special_tokens=True`` and must keep the tags.
* **A generation budget for this tokenizer**: the longest reference answer of the course's train problems, in
  this tokenizer's tokens, plus a quarter (room for a model that writes a little more), rounded up to a multiple
  of 16: 48 for the course's own tokenizer (longest answer 35 tokens), the cpu-tiny profile's budget.
"""
from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

from .data import load_jsonl
from .rewards import COURSE_TAGS, Tags

PAD_TOKEN = "<|pad|>"

# A role-prefixed template for models without one: the assistant's turn (what SFT trains on, marked with
# {% generation %}) ends with the tokenizer's own EOS, which is where generation stops.
PLAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ 'Assistant: ' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ message['role'] | capitalize + ': ' + message['content'] + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)


class AdaptationError(ValueError):
    """A model or tokenizer the course cannot use; the message names what is missing."""


@dataclass(frozen=True)
class Adaptation:
    """What :func:`adapt` found and changed.

    ``pad``: ``"own"`` or the token added; ``template``: ``"own"``, ``"trl-training"`` (TRL's training variant
    of the model's template) or ``"plain"``; ``added_tokens``: tokens added to the vocabulary (the embedding
    matrix grew by as many rows); ``max_new_tokens``: the generation budget for the course's answers with this
    tokenizer; ``changes``: one sentence per change, with the reason.
    """

    pad: str
    template: str
    added_tokens: tuple[str, ...]
    parameters: int
    max_new_tokens: int
    changes: tuple[str, ...]

    def __str__(self) -> str:
        head = f"{self.parameters:,} parameters; generation budget {self.max_new_tokens} tokens"
        return "\n".join([head, *(f"- {c}" for c in self.changes or ("nothing to change",))])


def _sample_chat(tags: Tags) -> tuple[list[dict], str]:
    answer = f"{tags.think_open}3 + 4 = 7{tags.think_close}{tags.answer_open}7{tags.answer_close}"
    return [{"role": "user", "content": "What is 3 + 4?"}, {"role": "assistant", "content": answer}], answer


def template_problems(tokenizer, tags: Tags = COURSE_TAGS, template: str | None = None) -> list[str]:
    """Why ``template`` (default: the tokenizer's own) cannot carry the course's chats; empty if it can."""
    template = template if template is not None else tokenizer.chat_template
    if not template:
        return ["it has no chat template"]
    messages, answer = _sample_chat(tags)
    try:
        full = tokenizer.apply_chat_template(messages, tokenize=False, chat_template=template)
        prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True,
                                               chat_template=template)
    except Exception as err:   # a template that cannot render a plain chat: any Jinja or type error
        return [f"its template fails on a plain chat ({type(err).__name__}: {err})"]
    problems = []
    if not full.startswith(prompt):
        problems.append("it does not render the prompt as a prefix of the whole chat")
    reply = full[len(prompt):] if full.startswith(prompt) else full
    lost = [t for t in tags.all() if t not in reply]
    if lost:
        problems.append(f"it drops the reasoning tags {lost} from the assistant's answer")
    elif answer not in reply:
        problems.append("it rewrites the text between the reasoning tags")
    if tokenizer.eos_token not in reply[reply.find(tags.answer_close):]:
        problems.append(f"it does not end the assistant's answer with EOS ({tokenizer.eos_token!r})")
    from trl.chat_template_utils import has_generation_markers
    if not has_generation_markers(template):
        problems.append("it has no {% generation %} marks (assistant-only loss needs them)")
    return problems


def _training_template(tokenizer, tags: Tags) -> str | None:
    """TRL's training variant of the tokenizer's template (generation marks added), if TRL has one that passes."""
    from trl.chat_template_utils import get_training_chat_template
    try:
        patched = get_training_chat_template(tokenizer)
    except Exception:      # TRL raises for templates it does not know
        return None
    return patched if patched and not template_problems(tokenizer, tags, patched) else None


def answer_budget(tokenizer, n: int = 2000, factor: float = 1.25, multiple: int = 16) -> int:
    """Generation budget for the course's answers: the longest of ``n`` train answers in tokens, times ``factor``,
    rounded up to a multiple of ``multiple``."""
    rows = load_jsonl("arithmetic", "train")[:n]
    longest = max(len(tokenizer(r["completion"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"])
                  for r in rows)
    return multiple * math.ceil(longest * factor / multiple)


def adapt_tokenizer(tokenizer, tags: Tags = COURSE_TAGS, *, keep_template: bool = False) -> dict:
    """The tokenizer's half of :func:`adapt` (pad token, tags as tokens, chat template), in place.

    Returns ``{"pad", "template", "added", "changes"}``; the model's embedding matrix must then grow by
    ``len(added)`` rows (:func:`adapt` does it).
    """
    if getattr(tokenizer, "eos_token", None) is None:
        raise AdaptationError("the tokenizer has no EOS token: the course ends every answer with EOS and stops "
                              "generating there; set tokenizer.eos_token to the token that ends a turn")
    changes, added = [], []
    pad = "own"
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        why = "there was none" if tokenizer.pad_token is None else "the pad token was EOS"
        tokenizer.add_special_tokens({"pad_token": PAD_TOKEN})
        pad = PAD_TOKEN
        added.append(PAD_TOKEN)
        changes.append(f"added {PAD_TOKEN} as the pad token ({why}; a pad equal to EOS makes EOS look like padding "
                       "to any mask built from the pad id)")
    split = [t for t in tags.all() if len(tokenizer(t, add_special_tokens=False)["input_ids"]) != 1]
    if split:
        from tokenizers import AddedToken
        tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in split])
        added += split
        changes.append(f"added the tags {split} as whole tokens (the tokenizer split them)")
    problems = template_problems(tokenizer, tags)
    template = "own"
    if problems:
        patched = _training_template(tokenizer, tags) if tokenizer.chat_template else None
        if patched is not None:
            tokenizer.chat_template, template = patched, "trl-training"
            changes.append("used TRL's training variant of the model's template (it adds {% generation %} marks)")
        elif keep_template:
            raise AdaptationError("the model's chat template cannot carry the course's chats: " + "; ".join(problems))
        else:
            tokenizer.chat_template, template = PLAIN_CHAT_TEMPLATE, "plain"
            changes.append("used the course's plain chat template: " + "; ".join(problems))
    if tokenizer.padding_side != "right":
        changes.append("pads on the right (it padded on the left): the course's loss and reward code finds an "
                       "answer's last token by position; generation pads on the left by itself")
    # written into tokenizer_config.json on save: without it a saved tokenizer reloads on the padding direction
    # its backend last used (generation's left)
    tokenizer.padding_side = tokenizer.init_kwargs["padding_side"] = "right"
    return {"pad": pad, "template": template, "added": added, "changes": changes}


def adapt(model, tokenizer, tags: Tags = COURSE_TAGS, *, keep_template: bool = False) -> Adaptation:
    """Make ``model`` and ``tokenizer`` (changed in place) fit the course's chat format; see the module docstring.

    Args:
        model: a causal language model (``AutoModelForCausalLM``) or a sequence classifier on the same backbone.
        tokenizer: its tokenizer (a fast tokenizer with an EOS token).
        tags: the reasoning format (default: the course's).
        keep_template: raise instead of replacing a model's own template that cannot carry the course's chats.

    Raises:
        AdaptationError: no EOS token, a model without token embeddings, or (with ``keep_template``) a template
            that cannot carry the course's chats; the message says what is missing.
    """
    if not hasattr(model, "get_input_embeddings") or model.get_input_embeddings() is None:
        raise AdaptationError(f"{type(model).__name__} has no token embeddings: the course needs a causal "
                              "language model (AutoModelForCausalLM) or a classifier on one")
    done = adapt_tokenizer(tokenizer, tags, keep_template=keep_template)
    if done["added"]:
        from .modeling import transformers_errors_only
        with transformers_errors_only():   # transformers announces the mean initialisation chosen here
            model.resize_token_embeddings(len(tokenizer), mean_resizing=True)   # new rows start near the mean embedding
    for config in (model.config, getattr(model, "generation_config", None)):
        if config is not None:
            config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    parameters = sum(p.numel() for p in model.parameters())
    return Adaptation(pad=done["pad"], template=done["template"], added_tokens=tuple(done["added"]),
                      parameters=parameters, max_new_tokens=answer_budget(tokenizer), changes=tuple(done["changes"]))


def budget_for(model_id: str, tags: Tags = COURSE_TAGS) -> int:
    """The generation budget (:func:`answer_budget`) of model ``model_id``'s tokenizer once adapted."""
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise AdaptationError(f"cannot load a tokenizer for the model {model_id!r} (a local folder saved with "
                              f"save_pretrained, or a hub id in the local cache when offline): {err}") from err
    adapt_tokenizer(tokenizer, tags)
    return answer_budget(tokenizer)


# A model of your own this small takes the CPU recipes' learning rates (tuned on the course's 0.46M-parameter
# Qwen3), a larger one the GPU recipes' (tuned on Qwen3-0.6B); recipes.recipe_for reads it. Sizes between the
# two are a guess either way: a notebook's recipe overrides (Params(recipe=...)) set them by hand.
SMALL_MODEL_PARAMETERS = 10_000_000


@lru_cache(maxsize=None)
def parameter_count(model_id: str) -> int:
    """Parameters of model ``model_id`` (local folder or cached hub id), counted from its config, no weights read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        config = AutoConfig.from_pretrained(model_id, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise AdaptationError(f"cannot read a config for the model {model_id!r}: {err}") from err
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())
