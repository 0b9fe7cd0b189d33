"""A fast decoder of the course's own: KV-cached sampling without ``generate``'s per-token overhead.

On the tiny model (4 layers, hidden 96) a decoding step is little arithmetic, and Hugging
Face ``generate`` adds per-token bookkeeping to it (mask building, cache objects, logits
processors, stopping criteria): ``make bench`` times both against what the FLOPs allow, and
``generate`` sits further above that bound than this loop. :func:`decode` runs the model's own weights (a LoRA
layer as the one weight ``W + scaling * B @ A`` its forward computes, tied embeddings and
biases as in ``forward``) in a plain loop with a preallocated key/value cache and one
additive attention bias:

1. **prefill** the left-padded prompts in one pass, writing each layer's keys and values;
2. **step**: feed the last token of every row, attend over the cache, pick the next token
   (argmax at ``temperature == 0``, else a draw from ``softmax(z / T)``, the full
   distribution as :func:`generation.sample_completions` asks of ``generate``);
3. stop when every row has produced an end-of-sequence token or the budget is spent.

Positions follow ``generate``'s rule for left padding (``cumsum(mask) - 1``), so the
logits are those of ``model(input_ids, attention_mask)`` on the same prefix (tested
against the full forward pass and against ``generate``'s greedy and sampled output).

It covers the Llama-style decoders the course meets (Qwen3, Qwen2, Llama, Mistral without
a sliding window) with SiLU, the default RoPE and float32 weights on a CPU: the course's
CPU path (in bfloat16 or with a GPU's kernels its fused products would round differently
from ``forward``'s). :func:`supports` says whether a model qualifies, and
:func:`generation.sample_completions` falls back to ``generate`` for any other model. It is
the course's sampling for evaluation, PPO rollouts, rejection sampling and best-of-N, and the
sampling step of TRL's ``GRPOTrainer`` on the CPU (:func:`training.grpo_trainer_class`, where
:func:`supports_sampling` holds: the trainer stays TRL's, as it does with vLLM on a GPU).
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from .losses import mask_positions

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen2", "llama", "mistral")
ENV_SWITCH = "COURSE_FAST_DECODE"  # "0" turns the fast path off (generate everywhere)


def _base_causal_lm(model):
    """The ``*ForCausalLM`` under a PEFT wrapper (its Linear layers are LoRA layers there)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


# generation-config fields that would make ``generate`` change the logits before the draw
# (None, transformers' default for each, is always neutral)
_LOGIT_CHANGING = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0,
                   "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
                   "forced_bos_token_id": None, "forced_eos_token_id": None, "min_new_tokens": None,
                   "sequence_bias": None, "num_beams": 1, "min_p": 0.0, "top_h": None, "typical_p": 1.0,
                   "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "exponential_decay_length_penalty": None,
                   "guidance_scale": 1.0, "watermarking_config": None, "max_time": None, "stop_strings": None,
                   "penalty_alpha": None, "diversity_penalty": 0.0, "num_beam_groups": 1,
                   # these change the decoding algorithm itself (assisted decoding, constraints, several returns)
                   "prompt_lookup_num_tokens": None, "assistant_early_exit": None, "token_healing": False,
                   "constraints": None, "force_words_ids": None, "num_return_sequences": 1}


def changes_logits(generation_config) -> bool:
    """True if ``generate`` with this config would edit the logits before its draw (a penalty, min-p, beams, ...).

    Temperature, top-k and top-p are not looked at here: :func:`generation.sample_completions`
    passes them to ``generate`` itself (the full distribution); :func:`supports_sampling` checks them.
    """
    if any(getattr(generation_config, k, None) not in (None, neutral) for k, neutral in _LOGIT_CHANGING.items()):
        return True
    return (getattr(generation_config, "min_length", 0) or 0) > 0


def supports_sampling(model, generation_config) -> bool:
    """True where :func:`decode` draws the tokens ``model.generate(..., generation_config=generation_config)`` draws.

    :func:`supports` for the model, and a config that samples from the full ``softmax(z / T)``:
    ``do_sample``, a float temperature above 0, top-k 0 and top-p 1 given explicitly (None means
    "unset" to ``generate``, which then applies the model's or its own default top-k of 50), and
    nothing in :func:`changes_logits`. The model may be in training mode (TRL samples there) only
    if no dropout is active, since :func:`decode` applies none (every ``nn.Dropout`` at p = 0 and
    the config's attention dropout 0), and not with gradient checkpointing, which turns the
    cache off inside ``generate``.
    """
    if not supports(model) or getattr(generation_config, "do_sample", None) is not True \
            or changes_logits(generation_config):
        return False
    temperature = getattr(generation_config, "temperature", None)
    if not isinstance(temperature, float) or temperature <= 0:
        return False
    if getattr(generation_config, "top_k", None) != 0 or getattr(generation_config, "top_p", None) != 1.0:
        return False
    base = _base_causal_lm(model)
    if getattr(base.config, "attention_dropout", 0.0):
        return False
    if model.training and getattr(base, "is_gradient_checkpointing", False):
        return False
    return all(m.p == 0 for m in model.modules() if isinstance(m, torch.nn.Dropout))


def supports(model) -> bool:
    """True where :func:`decode` reproduces ``model``'s forward pass and ``generate``'s draw (else use ``generate``).

    False when env ``COURSE_FAST_DECODE=0``; for an architecture, activation or RoPE
    variant the engine does not implement; for a PEFT prompt-learning model (its virtual
    tokens live outside the base model); for weights that are not float32 on a CPU (in
    bfloat16, or with a GPU's kernels, the fused products and norms round differently from
    ``forward``'s, so the tokens would not be ``generate``'s: the GPU profile keeps ``generate``,
    where its per-token cost matters far less); and when the model's generation
    config asks ``generate`` to change the logits (a repetition penalty, min-p, beams, ...).
    """
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return False
    peft_config = getattr(model, "active_peft_config", None)
    if peft_config is not None and getattr(peft_config, "is_prompt_learning", False):
        return False
    base = _base_causal_lm(model)
    param = next(iter(base.parameters()), None) if hasattr(base, "parameters") else None
    if param is None or param.dtype != torch.float32 or param.device.type != "cpu":
        return False
    gen = getattr(base, "generation_config", None)
    if gen is not None and changes_logits(gen):
        return False
    config = getattr(base, "config", None)
    inner = getattr(base, "model", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES or inner is None:
        return False
    if getattr(config, "hidden_act", "silu") != "silu":   # the fused MLP applies SiLU
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return False
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if any(t != "full_attention" for t in layer_types):
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True) \
            and config.model_type == "mistral":
        return False
    return all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")) \
        and hasattr(base, "lm_head")


def _linear_weights(module):
    """``(weight, bias)`` with which ``F.linear`` computes ``module``, else None (then the module is called as it is).

    A plain ``nn.Linear`` gives its own. A PEFT LoRA ``Linear`` gives its base weight plus
    each active adapter's ``scaling * B @ A`` (PEFT's ``get_delta_weight``), i.e. the weight
    ``merge_adapter`` would write, or the base weight alone while adapters are disabled:
    the same function as the layer's forward, in one product instead of three plus a cast
    and an add per adapter. Adapters with dropout, their own bias or a LoRA variant (DoRA,
    aLoRA, ...: PEFT's ``lora_variant``), and other PEFT layer types (LoHa, OFT, ...), are
    called as they are.
    """
    if type(module) is torch.nn.Linear:
        return module.weight, module.bias
    base = getattr(module, "base_layer", None)
    if type(base) is not torch.nn.Linear or not hasattr(module, "get_delta_weight") or getattr(module, "merged", False):
        return None
    lora_a = getattr(module, "lora_A", None)
    if not isinstance(lora_a, torch.nn.ModuleDict):            # not a LoRA layer: its delta is no sum B @ A
        return None
    if getattr(module, "disable_adapters", False):
        return base.weight, base.bias
    weight = base.weight
    for name in module.active_adapters:
        if name not in lora_a:
            continue
        if name in getattr(module, "lora_variant", {}):         # DoRA, aLoRA, ...: not W + delta everywhere
            return None
        dropout = module.lora_dropout[name]
        if not isinstance(dropout, torch.nn.Identity) and getattr(dropout, "p", 0) != 0:
            return None
        if module.use_dora.get(name, False) or getattr(module, "lora_bias", {}).get(name, False):
            return None
        weight = weight + module.get_delta_weight(name)
    return weight, base.bias


def _fused_linear(modules):
    """One ``(weight, bias)`` for several linear layers applied to the same input, else None.

    Fusing q/k/v (and gate/up) saves two matrix products per layer and step; a layer
    :func:`_linear_weights` cannot express is called as it is instead.
    """
    parts = [_linear_weights(m) for m in modules]
    if any(p is None for p in parts):
        return None
    if len(parts) == 1:
        return parts[0]
    weight = torch.cat([w for w, _ in parts])
    if all(b is None for _, b in parts):
        return weight, None
    return weight, torch.cat([b if b is not None else w.new_zeros(w.size(0)) for w, b in parts])


class _Decoder:
    """The model's modules, called in a KV-cached loop (one object per :func:`decode` call)."""

    def __init__(self, model, batch: int, max_len: int):
        base = _base_causal_lm(model)
        self.config = base.config
        self.inner, self.lm_head = base.model, base.lm_head
        attn = self.inner.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.n_heads = self.config.num_attention_heads
        self.n_kv = self.config.num_key_value_heads
        self.scaling = attn.scaling
        self.sizes = [self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.n_kv * self.head_dim]
        self.qkv = [_fused_linear([l.self_attn.q_proj, l.self_attn.k_proj, l.self_attn.v_proj])
                    for l in self.inner.layers]
        self.gate_up = [_fused_linear([l.mlp.gate_proj, l.mlp.up_proj]) for l in self.inner.layers]
        self.o = [_fused_linear([l.self_attn.o_proj]) for l in self.inner.layers]
        self.down = [_fused_linear([l.mlp.down_proj]) for l in self.inner.layers]
        param = next(base.parameters())
        shape = (batch, self.n_kv, max_len, self.head_dim)
        self.k = [param.new_zeros(shape) for _ in self.inner.layers]
        self.v = [param.new_zeros(shape) for _ in self.inner.layers]
        # cos/sin of every position once (the rotary module's own computation, position by position)
        table = torch.arange(max_len, device=param.device)[None]
        self.cos, self.sin = self.inner.rotary_emb(param.new_zeros(1, max_len, 1), table)   # (1, L, D)

    @staticmethod
    def _norm(module, x):
        """The model's RMSNorm as one fused op (same formula: x / rms(x) * weight, in float32)."""
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6))
        return F.rms_norm(x.float(), (x.size(-1),), module.weight.float(), eps).to(x.dtype)

    @staticmethod
    def _rotate(x, cos, sin):
        half = x.size(-1) // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _qkv(self, i, layer, x):
        fused = self.qkv[i]
        if fused is None:
            attn = layer.self_attn
            return attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
        return F.linear(x, *fused).split(self.sizes, dim=-1)

    def _mlp(self, i, layer, x):
        fused = self.gate_up[i]
        if fused is None:
            return layer.mlp(x)
        gate, up = F.linear(x, *fused).chunk(2, dim=-1)
        act = F.silu(gate) * up
        return F.linear(act, *self.down[i]) if self.down[i] is not None else layer.mlp.down_proj(act)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int, bias: torch.Tensor):
        """Logits of the last position for ``ids`` ``(B, T)`` written at cache columns ``start:start+T``.

        ``bias`` is added to the attention scores: ``(B, 1, T, start+T)`` for the prefill, ``(B, 1, 1,
        start+T)`` for a step; 0 where a query may attend to a key, ``-inf`` where not.
        """
        b, t = ids.shape
        h = self.inner.embed_tokens(ids)
        cos, sin = self.cos[0][positions][:, None], self.sin[0][positions][:, None]   # (B, 1, T, D)
        end = start + t
        groups = self.n_heads // self.n_kv
        for i, layer in enumerate(self.inner.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(i, layer, self._norm(layer.input_layernorm, h))
            q = q.view(b, t, self.n_heads, self.head_dim)
            k = k.view(b, t, self.n_kv, self.head_dim)
            if hasattr(attn, "q_norm"):  # Qwen3 normalises each head's query and key
                q, k = self._norm(attn.q_norm, q), self._norm(attn.k_norm, k)
            q, k = self._rotate(q.transpose(1, 2), cos, sin), self._rotate(k.transpose(1, 2), cos, sin)
            self.k[i][:, :, start:end] = k
            self.v[i][:, :, start:end] = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            keys, values = self.k[i][:, :, :end], self.v[i][:, :, :end]
            if t == 1:  # one query per row: two small products beat the fused kernel's set-up
                qg = q.reshape(b, self.n_kv, groups, self.head_dim)               # head h uses kv head h // groups
                scores = (qg @ keys.transpose(-1, -2)) * self.scaling + bias      # (B, KV, G, end)
                out = (scores.softmax(-1) @ values).reshape(b, 1, -1)
            else:
                out = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias, scale=self.scaling,
                                                     enable_gqa=groups > 1)
                out = out.transpose(1, 2).reshape(b, t, -1)
            h = h + (F.linear(out, *self.o[i]) if self.o[i] is not None else attn.o_proj(out))
            h = h + self._mlp(i, layer, self._norm(layer.post_attention_layernorm, h))
        return self.lm_head(self._norm(self.inner.norm, h[:, -1]))               # (B, V)


def _draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row: argmax at ``temperature == 0``, else a draw from ``softmax(logits / T)``.

    ``torch.multinomial`` on the same probabilities as ``generate``'s sampling step, so with
    the same RNG state the engine draws the very tokens ``generate`` draws (tested, float32 on
    a CPU): moving a run onto the engine changes none of its numbers.
    """
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def attention_biases(prompt_mask: torch.Tensor, total: int, dtype=torch.float32):
    """``(bias, prefill)``: additive attention biases, 0 where a query may attend to a key, ``-inf`` where not.

    ``bias`` ``(B, total)`` covers the cache's columns (the prompt's real tokens open, padding
    and the columns not yet generated closed; a step opens its own column); ``prefill``
    ``(B, 1, P, P)`` is the causal prefill's. A padded query row would see no key at all
    (NaN), so it sees itself; its output is never used.
    """
    b, p = prompt_mask.shape
    bias = torch.full((b, total), float("-inf"), dtype=dtype, device=prompt_mask.device)
    bias[:, :p].masked_fill_(prompt_mask.bool(), 0.0)
    causal = torch.ones(p, p, dtype=torch.bool, device=prompt_mask.device).tril()
    prefill = bias[:, None, :p].masked_fill(~causal[None], float("-inf"))          # (B, P, P)
    prefill.diagonal(dim1=1, dim2=2).clamp_(min=0.0)
    return bias, prefill[:, None]


@torch.no_grad()
def decode(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int,
           eos_ids: list[int], pad_id: int, temperature: float = 0.0,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """``(B, C)`` new tokens after left-padded prompts, ``C <= max_new_tokens``; pad after each EOS.

    Greedy at ``temperature == 0``; otherwise each token is drawn from
    ``softmax(logits / temperature)`` with ``torch.multinomial`` (the global RNG unless
    ``generator`` is given). Stops early once every row has ended, as ``generate`` does.
    It applies no dropout: call it in eval mode (``generation.eval_mode``), or in training mode only
    where no dropout is active (:func:`supports_sampling` checks).
    """
    if prompt_ids.dim() != 2 or prompt_ids.shape != prompt_mask.shape:
        raise ValueError(f"prompt_ids and prompt_mask must be (B, P) alike, got {tuple(prompt_ids.shape)} "
                         f"and {tuple(prompt_mask.shape)}")
    b, p = prompt_ids.shape
    device = prompt_ids.device
    pad_id = eos_ids[0] if pad_id is None and eos_ids else pad_id   # as generate does without a pad token
    if max_new_tokens <= 0:
        return prompt_ids.new_full((b, 0), pad_id)
    dec = _Decoder(model, b, p + max_new_tokens)
    bias, prefill = attention_biases(prompt_mask, p + max_new_tokens, next(_base_causal_lm(model).parameters()).dtype)
    positions = mask_positions(prompt_mask)                                        # generate's rule
    logits = dec.forward(prompt_ids, positions, 0, prefill)
    next_pos = positions[:, -1] + 1
    eos = torch.tensor(eos_ids, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    out = []
    for step in range(max_new_tokens):
        token = _draw(logits, temperature, generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        out.append(token)
        done = done | torch.isin(token, eos)
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        col = p + step
        bias[:, col] = 0.0
        logits = dec.forward(token[:, None], next_pos[:, None], col, bias[:, None, None, :col + 1])
        next_pos = next_pos + 1
    return torch.stack(out, 1)
