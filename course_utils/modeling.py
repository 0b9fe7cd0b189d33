"""Tokenizer and model for the CPU path: a real Qwen3 built from a config.

* ``train_tokenizer`` trains a byte-level BPE on the course corpus with the
  ``tokenizers`` library. Digits are split one per token (so ``68`` is ``6``, ``8``:
  addition becomes a digit-by-digit pattern a tiny model can learn) and the tags
  ``<think>``/``</think>``/``<answer>``/``</answer>`` are single *non-special*
  tokens: TRL decodes completions with ``skip_special_tokens=True`` and must keep them.
* ``CHAT_TEMPLATE`` is a Qwen-style template whose assistant content sits inside
  ``{% generation %}`` so ``return_assistant_tokens_mask`` / TRL's
  ``assistant_only_loss`` know which tokens to train.
* ``tiny_qwen3_config`` / ``build_model`` make a ``Qwen3ForCausalLM`` from scratch.
* Checkpoints are saved and loaded as safetensors only (``save_pretrained`` with
  safetensors, ``from_pretrained(use_safetensors=True)``).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from .data import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, load_jsonl

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN]
TAG_TOKENS = [THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE]
DEFAULT_VOCAB_SIZE = 640

# Qwen-style chat markup. {% generation %} marks what the assistant says, which is
# what SFT trains on (assistant_only_loss) and what the loss-mask figure shows.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tokenizer_training_texts() -> list[str]:
    """What the tokenizer learns its merges from: corpus plus train-split chats."""
    texts = [r["text"] for r in load_jsonl("corpus", "train")]
    texts += [p["question"] + " " + p["completion"] for p in load_jsonl("arithmetic", "train")]
    return texts


def train_tokenizer(texts: list[str] | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE
                    ) -> PreTrainedTokenizerFast:
    """Train the course's byte-level BPE and wrap it for ``transformers``.

    Deterministic for a given ``texts``: ``tokenizers`` BPE training is single-pass
    counting plus ordered merges.
    """
    if vocab_size < 300:
        raise ValueError(f"vocab_size={vocab_size} is too small: 256 byte tokens come first")
    texts = tokenizer_training_texts() if texts is None else texts
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),  # 68 -> 6 | 8
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    # Tags are whole tokens but not "special": decoding with skip_special_tokens keeps them.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        padding_side="right", model_max_length=256)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_qwen3_config(vocab_size: int, hidden_size: int = 96, layers: int = 4, heads: int = 4,
                      kv_heads: int = 2, intermediate_size: int = 256, max_positions: int = 256,
                      pad_token_id: int | None = None, eos_token_id: int | None = None,
                      bos_token_id: int | None = None, head_dim: int | None = None) -> Qwen3Config:
    """A Qwen3 config small enough to train on two CPU cores in about a minute.

    Same architecture as Qwen3-0.6B (RMSNorm, rotary positions, grouped-query
    attention with q/k norms, SwiGLU MLP, tied embeddings); only the sizes differ.

    ``head_dim`` defaults to ``hidden_size // heads`` (24). Qwen3 lets the two differ (Qwen3-0.6B runs 16 heads of
    128 on a hidden size of 1,024); vLLM's CPU attention takes head sizes from 32 up, so the course's model runs in
    vLLM at a wider head size; :func:`widen_heads` re-expresses a trained model in wider heads, the same function
    (docs/vllm-cpu.md says why notebook 11 does that rather than the course's default changing).
    """
    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=hidden_size // heads if head_dim is None else head_dim, max_position_embeddings=max_positions,
        tie_word_embeddings=True, rope_theta=10000.0, attention_dropout=0.0,
        pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=bos_token_id,
        use_cache=True)


def cannot_widen_heads(config) -> str | None:
    """Why :func:`widen_heads` cannot re-express a model of ``config`` exactly, or None where it can: a Qwen3 (its
    q/k norms take the rescaling) without attention biases, with the default rotary embedding."""
    if getattr(config, "model_type", None) != "qwen3":
        return f"widen_heads handles Qwen3 (q/k norms), not {getattr(config, 'model_type', None)!r}"
    if getattr(config, "attention_bias", False):
        return "widen_heads handles Qwen3 without attention biases (the course's and Qwen3's own)"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type != "default":
        return f"widen_heads handles the default rotary embedding, not {rope_type!r}"
    return None


def widen_heads(model: Qwen3ForCausalLM, head_dim: int) -> Qwen3ForCausalLM:
    """The same function as the Qwen3 ``model``, computed in attention heads ``head_dim`` wide (at least its own).

    Every head keeps its ``d`` real dimensions and gains ``head_dim - d`` zero ones, placed so that the rotary
    embedding pairs and turns the real ones as before:

    - rotary pairs dimension ``i`` with ``i + d/2`` at frequency ``θ^(-2i/d)`` (rotate-half, the NeoX layout HF and
      vLLM both use), so the real halves go to slots ``[0, d/2)`` and ``[D/2, D/2 + d/2)`` of the wider head, and
      ``rope_theta`` becomes ``θ^(D/d)``, which gives slot ``i`` the frequency ``θ^(-2i/d)`` again;
    - the q/k RMSNorms now average over ``D`` dimensions, ``D/d`` times fewer of them non-zero, so each normalised
      vector grows by ``sqrt(D/d)``; the score's scale falls from ``1/sqrt(d)`` to ``1/sqrt(D)``. Scaling the
      q-norm's weight by ``sqrt(d/D)`` makes the product exact (but for the norm's ``eps``, far below the variance);
    - the value's zero dimensions meet zero columns of ``o_proj``.

    A new ``Qwen3ForCausalLM`` is returned, in the input's dtype (``model`` is left as it was). Its
    logits equal the input's to float rounding (``tests/test_modeling.py``). Training keeps the new q and k
    dimensions at zero (their norm weights are zero, and a zero weight on a zero input gets no gradient); the value's
    new dimensions, and ``o_proj``'s columns for them, move only through an adapter such as LoRA, whose factors reach
    every dimension.
    """
    import copy
    config = model.config
    why = cannot_widen_heads(config)
    if why:
        raise ValueError(why)
    d, heads, kv_heads = config.head_dim, config.num_attention_heads, config.num_key_value_heads
    if head_dim < d or head_dim % 2 or d % 2:
        raise ValueError(f"head_dim {head_dim}: need an even size at least the model's {d}")
    rope = dict(config.rope_parameters or {})
    half, wide_half = d // 2, head_dim // 2
    slots = torch.cat([torch.arange(half), wide_half + torch.arange(half)])       # where each real dimension goes
    new_config = copy.deepcopy(config)
    new_config.head_dim = head_dim
    new_config.rope_parameters = {**rope, "rope_theta": float(rope["rope_theta"]) ** (head_dim / d)}
    wide = Qwen3ForCausalLM(new_config)
    state = model.state_dict()

    def rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:          # (n_heads * d, in) -> (n_heads * D, in)
        out = weight.new_zeros(n_heads, head_dim, weight.shape[-1])
        out[:, slots] = weight.reshape(n_heads, d, -1)
        return out.reshape(n_heads * head_dim, -1)

    new_state = {}
    for name, tensor in state.items():
        if name.endswith("self_attn.q_proj.weight"):
            tensor = rows(tensor, heads)
        elif name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            tensor = rows(tensor, kv_heads)
        elif name.endswith("self_attn.o_proj.weight"):                      # (hidden, heads * d): columns
            tensor = rows(tensor.T, heads).T.contiguous()
        elif name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
            scale = (d / head_dim) ** 0.5 if ".q_norm." in name else 1.0
            norm = tensor.new_zeros(head_dim)
            norm[slots] = tensor * scale
            tensor = norm
        new_state[name] = tensor
    wide.load_state_dict(new_state, strict=True)
    wide.generation_config = copy.deepcopy(model.generation_config)
    return wide.to(next(model.parameters()).dtype).train(model.training)


SHAPE_ARGUMENTS = ("hidden_size", "layers", "heads", "kv_heads", "head_dim", "intermediate_size", "max_positions")


def course_model_shape() -> dict:
    """The course model's sizes, as :func:`tiny_qwen3_config`'s defaults give them. A stage trained from scratch
    records them among its inputs (``stages.stage_inputs``), so a checkpoint of another shape (one saved under
    another default) is rebuilt, never loaded as if it were today's."""
    import inspect
    parameters = inspect.signature(tiny_qwen3_config).parameters
    return {name: parameters[name].default for name in SHAPE_ARGUMENTS}


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int, **config_kwargs) -> Qwen3ForCausalLM:
    """A freshly initialised tiny ``Qwen3ForCausalLM`` matching ``tokenizer``."""
    config = tiny_qwen3_config(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, **config_kwargs)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


@contextmanager
def transformers_errors_only():
    """Inside the block, transformers logs errors only: around the calls whose warnings are the course's intent, e.g. a
    new classification head "missing" from the checkpoint it is put on, or new embedding rows for added tokens. A
    learner would read those warnings as faults, and an executed copy would carry them into the book."""
    from transformers.utils import logging as hf_logging
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


def disable_dropout(*models: torch.nn.Module) -> None:
    """Set every ``nn.Dropout`` of ``models`` to p = 0, as TRL's ``disable_dropout_in_model`` does.

    RL compares log-probs of the same tokens computed twice (when sampled and when trained on):
    with dropout active they differ at random and the ratio starts away from 1. The course's
    Qwen3 has no dropout; a hub model may (GPT-2: 0.1).
    """
    for model in models:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    """Parameter counts: total (tied weights once), embedding, and the transformer body."""
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel()
    return {"total": total, "embedding": emb, "body": total - emb}


def save_checkpoint(model, tokenizer, path: str | Path) -> Path:
    """Save model (safetensors) and tokenizer to ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def check_safetensors_dir(path: str | Path) -> Path:
    """Raise a clear error unless ``path`` is a folder with safetensors weights."""
    path = Path(path)
    if path.is_file():
        raise ValueError(f"{path} is a file; a checkpoint is a folder saved with save_pretrained")
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint folder {path} does not exist")
    if not any(path.glob("*.safetensors")):
        found = sorted(p.name for p in path.iterdir())
        raise ValueError(f"{path} holds no *.safetensors weights (found {found}); the course "
                         "loads weights only as safetensors, never pickled .bin/.pt files")
    return path


# Models of other families, built from configs: what a learner's own model looks like to the course
FAMILIES = ("llama", "gpt2")
POSITIONS = 512   # longer than any course chat (SFT truncates at 256 tokens): GPT-2's positions are learned
SIZES = {   # family_model's shapes: the matrix's (built in a second) and the course model's (to pretrain)
    "matrix": dict(vocab=400, hidden=32, mlp=64, layers=1, heads=2, kv_heads=1),
    "course": dict(vocab=640, hidden=96, mlp=256, layers=4, heads=4, kv_heads=2),
}


def byte_bpe(special: list[str], vocab_size: int = 400, texts: list[str] | None = None, split_digits: bool = False):
    """A byte-level BPE trained on ``texts`` (default: 500 train chats) with the tags' angle brackets removed, so it
    has never seen the course's tags as tokens (as a real model's tokenizer has not). ``split_digits`` makes every
    digit a token of its own, as Llama's and SmolLM's tokenizers do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from course_utils.data import load_jsonl

    if texts is None:
        texts = [r["question"] + " " + r["completion"] for r in load_jsonl("arithmetic", "train")[:500]]
    texts = [t.replace("<", " ").replace(">", " ") for t in texts]
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def family_model(family: str, seed: int = 0, size: str = "matrix"):
    """A random model of ``family`` and its tokenizer, built in about a second, from a config (no download).

    ``llama``: a Llama-style model with a byte-level BPE tokenizer, ``<s>`` / ``</s>``, no pad token and no chat
    template. ``gpt2``: a GPT-2-style model whose single ``<|endoftext|>`` is BOS and EOS, no pad token, no template,
    learned positions. Both lack what :func:`course_utils.adapt.adapt` adds, as a hub model would.

    ``size="matrix"``: the matrix's (one layer, width 32, a 400-token BPE). ``size="course"``: the course's own
    model's shape (4 layers, width 96, 4 heads, 2 KV heads) with a BPE of up to 640 tokens learned from the corpus
    and the train chats, digits one token each: what :mod:`course_tools.base_model` pretrains.
    """
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {tuple(SIZES)}")
    dims = SIZES[size]
    texts = None
    if size == "course":
        texts = tokenizer_training_texts()
    bpe = dict(vocab_size=dims["vocab"], texts=texts, split_digits=size == "course")
    if family == "llama":
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=byte_bpe(["<s>", "</s>"], **bpe), bos_token="<s>",
                                            eos_token="</s>")
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=dims["hidden"], intermediate_size=dims["mlp"],
                             num_hidden_layers=dims["layers"], num_attention_heads=dims["heads"],
                             num_key_value_heads=dims["kv_heads"], max_position_embeddings=POSITIONS,
                             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        cls = LlamaForCausalLM
    elif family == "gpt2":
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=byte_bpe(["<|endoftext|>"], **bpe),
                                            bos_token="<|endoftext|>", eos_token="<|endoftext|>")
        config = GPT2Config(vocab_size=len(tokenizer), n_embd=dims["hidden"], n_layer=dims["layers"],
                            n_head=dims["heads"], n_positions=POSITIONS,   # GPT-2's MLP: 4 x width
                            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        cls = GPT2LMHeadModel
    else:
        raise ValueError(f"unknown family {family!r}; choose one of {FAMILIES}")
    torch.manual_seed(seed)
    return cls(config), tokenizer


def save_family_model(family: str, folder: Path) -> Path:
    """``family_model(family)`` saved to ``folder`` as a hub-style local folder (safetensors), once."""
    folder = Path(folder)
    if not (folder / "model.safetensors").is_file():
        model, tokenizer = family_model(family)
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    return folder
