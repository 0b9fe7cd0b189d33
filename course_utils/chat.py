"""The chat format, in one place: a question as the prompt the assistant answers, and a chat as token ids.

Training (SFT rows, DPO pairs, GRPO prompts, PPO rollouts, distillation data) and evaluation
both go through these two functions, so the prompt a model is trained on is the prompt it is
measured on. The template itself comes from the tokenizer (``tokenizer.chat_template``).
"""
from __future__ import annotations

from .data import to_messages


def chat_prompt(tokenizer, question: str) -> str:
    """The chat-formatted prompt for one user question, ending where the assistant speaks."""
    return tokenizer.apply_chat_template(to_messages(question), tokenize=False, add_generation_prompt=True)


def encode_chat(tokenizer, prompt_messages, answer_messages) -> tuple[list[int], int]:
    """Token ids of the whole chat and the prompt's length (the completion is the rest, as in TRL)."""
    prompt = tokenizer.apply_chat_template(prompt_messages, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(prompt_messages + answer_messages, tokenize=False)
    if not full.startswith(prompt):
        raise ValueError("the chat template does not render the prompt as a prefix of the full chat")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(full[len(prompt):], add_special_tokens=False)["input_ids"]
    return prompt_ids + completion_ids, len(prompt_ids)
