"""Training memory before a run: what each notebook's GPU recipe holds on the GPU, for Qwen3-0.6B / 1.7B / 4B.

One :class:`Estimate` per (notebook, model): the model copies it keeps (each with its bytes per parameter),
then the largest of its *phases* (an update, a rollout's generation, the scoring of a rollout), each the sum of
activations, logits and KV cache. The peak is ``weights + grads + optimizer + max over phases``::

    from course_utils import memory
    print(memory.table())                      # every notebook, the three Qwen3 sizes
    print(memory.table(notebooks=["05"]))      # one notebook's parameters cell
    memory.estimate("07", "Qwen/Qwen3-4B").peak_gib

**What the course really loads (read from the notebooks and ``stages``).** A hub model comes in bfloat16
(``profile.dtype``); 02 and 03 train it as it is, in pure bf16 (the Trainer's ``bf16=True`` keeps no fp32 master
weights for a bf16 model, and torch's AdamW keeps its moments in the parameter's dtype, so 2 + 2 + 4 = 8 bytes per
trained parameter; 02 also keeps the pretrained model it started from). 05, 06, 07, 08 and 09 cast their policy
(and reference, critic, teacher) to **float32** (``stages.load_policy_and_reference``, ``fresh_policy``,
``.float()``): the fp32 weights are the master weights, so a trained copy costs 4 (weights) + 4 (grads) + 8
(AdamW's two fp32 moments) = 16 bytes per parameter and a frozen one 4. The Trainer's ``bf16=True`` then runs the
forward under bf16 autocast (06-09); the course's own PPO loop (05) runs in plain fp32. LoRA (07, 08, 11) trains
only the adapter (fp32: PEFT upcasts adapters), so the base costs its weights alone and "the reference" is the same
network with the adapter off: no second copy.

**Activations** (:func:`activation_bytes_per_token`) are counted tensor by tensor from what autograd saves in
transformers' Qwen3 with SDPA attention (RMSNorm's fp32 upcasts, q/k norms, the SwiGLU MLP's four intermediate
tensors, grouped-query k and v repeated to all heads when the batch is padded): ``tests/test_memory.py`` sums the
saved tensors of a tiny Qwen3 on the CPU and finds the formula within a few percent in fp32, bf16 and autocast.
With gradient checkpointing (the Trainer's, on the ``gpu`` profile) each layer keeps only its input, and one
layer's activations are rebuilt at a time during the backward; the logits' backward is over before the first layer is
rebuilt, so a checkpointed update's peak holds the larger of the two (``Phase.rebuilt``), not their sum. A whole
step's peak resident memory on the CPU agrees with the estimate within a few percent, with and without checkpointing
(with it the estimate errs above: it sizes the rebuilt layer's backward from above).

**Logits.** A ``(B, T, V)`` tensor with V = 151,936 is the usual cause of an out-of-memory error: one fp32 copy of
16 sequences of 1,024 tokens is 9.3 GiB. How many copies are alive at the peak depends on the code path; the
bytes per element of ``B x T x V`` below were measured on the CPU (peak resident memory, tests/test_memory.py):

* ``HF_LOSS_BYTES`` 12: transformers' causal-LM loss (SFT): the fp32 log-softmax, its gradient and the incoming one.
* ``PPO_UPDATE_BYTES`` 24 (per completion token): 05's ``policy_value_forward`` keeps ``z = logits / T``, the
  log-softmax and its exponential for the entropy; the backward adds their gradients.
* ``PPO_SCORING_BYTES`` 16: the same without gradients, over the whole rollout batch; ``REFERENCE_BYTES`` 12 (per
  token of the whole sequence): ``generation.logps_under``, the logits, their copy divided by T and logsumexp's
  temporary ``exp(z - max)``.
* ``GKD_BYTES`` 32: TRL's GKD loss: student and teacher logits (bf16), each divided by T, both log-softmaxes, the
  pointwise KL, its masked copy, and the gradients.
* TRL 1.15's DPO and GRPO never make the ``(B, T, V)`` tensor on a GPU: ``add_fused_lm_head`` projects 4,096
  tokens x 32,768 vocabulary entries at a time (:func:`fused_logits_bytes`).

**KV cache**: ``2 x layers x kv_heads x head_dim`` values per token, in the generating model's dtype (fp32 where the
policy was cast to fp32: generation runs outside autocast). **Not counted**: CUDA's context and cuBLAS workspaces
(~0.5-1 GiB), the allocator's fragmentation, generation's per-step logits (``logits_to_keep=1``), evaluation
batches, and vLLM's reservation in 11 (:func:`vllm_standby_share` x the GPU's memory, on top of the row: in 11's
standby mode unsloth chooses the share from the card's size and overrides ``gpu_memory_utilization``).

Lengths are each recipe's maxima (``max_length``, ``max_new_tokens``, ``max_completion_length``): the worst case,
which a model that rambles (a random or freshly RL-trained one) reaches. Prompts are ``prompt_tokens`` long (64:
the course's arithmetic prompts in Qwen3's chat template are shorter). ``scripts/gpu_memory_check.py`` measures
05, 06 and 07 on a GPU and compares ``torch.cuda.max_memory_allocated`` with these estimates.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

GIB = 2 ** 30
VOCAB_SIZE = 151936
HEAD_DIM = 128

QWEN3_SIZES = {
    # the public config.json of each model (all: head_dim 128, vocab 151,936, tied input and output embeddings)
    "Qwen/Qwen3-0.6B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8),
    "Qwen/Qwen3-1.7B": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8),
    "Qwen/Qwen3-4B": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                          num_attention_heads=32, num_key_value_heads=8),
}
MODELS = tuple(QWEN3_SIZES)

# bytes per element of a (B, T, V) logits shape at the peak of each code path (see the module docstring)
HF_LOSS_BYTES = 12
PPO_UPDATE_BYTES = 24
PPO_SCORING_BYTES = 16
REFERENCE_BYTES = 12
GKD_BYTES = 32
# TRL 1.15's chunked log-prob kernel (trl/kernels/chunked_logprob.py): one bf16 tile of this many tokens x vocab entries
FUSED_TOKEN_CHUNK = 4096
FUSED_VOCAB_CHUNK = 32768

PRECISIONS = ("fp32", "bf16", "autocast")
"""``fp32``: fp32 weights, no autocast (05's loop, the CPU). ``bf16``: bf16 weights (02, 03, 11). ``autocast``: fp32
weights under the Trainer's bf16 autocast (06-09)."""

PROMPT_TOKENS = 64


# --------------------------------------------------------------------------- the models
def qwen3_config(model_id: str = "Qwen/Qwen3-0.6B", **overrides):
    """transformers' ``Qwen3Config`` of ``model_id`` from the sizes written above (nothing is downloaded)."""
    from transformers import Qwen3Config
    if model_id not in QWEN3_SIZES:
        raise ValueError(f"no sizes for {model_id!r}; known: {list(QWEN3_SIZES)}")
    kwargs = dict(vocab_size=VOCAB_SIZE, head_dim=HEAD_DIM, tie_word_embeddings=True, max_position_embeddings=40960,
                  rope_theta=1_000_000.0, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
                  **QWEN3_SIZES[model_id])
    kwargs.update(overrides)
    return Qwen3Config(**kwargs)


def parameter_count(config, head: str = "causal_lm") -> int:
    """Parameters of a Qwen3 built from ``config`` on the ``meta`` device (no memory, no download); tied weights once.

    ``head``: ``"causal_lm"`` (``Qwen3ForCausalLM``) or ``"score"`` (``Qwen3ForSequenceClassification`` with one
    label: the backbone plus an ``h x 1`` head, as 03's reward model and 05's critic).
    """
    if head not in ("causal_lm", "score"):
        raise ValueError(f"head must be 'causal_lm' or 'score', got {head!r}")
    return _parameter_count(config.to_json_string(), type(config), head)


@functools.lru_cache(maxsize=64)
def _parameter_count(config_json: str, config_class, head: str) -> int:
    import json

    from transformers import Qwen3ForCausalLM, Qwen3ForSequenceClassification
    config = config_class.from_dict(json.loads(config_json))
    with torch.device("meta"):
        if head == "causal_lm":
            model = Qwen3ForCausalLM(config)
        else:
            config.num_labels = 1
            model = Qwen3ForSequenceClassification(config)
    return sum(p.numel() for p in model.parameters())


def lora_parameters(config, r: int) -> int:
    """LoRA adapter parameters on every linear layer of the decoder (PEFT's ``"all-linear"``, which skips the LM head,
    and 11's seven projections): ``r x (in + out)`` for q, k, v, o, gate, up and down in each layer."""
    h, i = config.hidden_size, config.intermediate_size
    hq, hkv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    per_layer = (h + hq) + 2 * (h + hkv) + (hq + h) + 2 * (h + i) + (i + h)
    return r * per_layer * config.num_hidden_layers


# --------------------------------------------------------------------------- per-token terms
def layer_activation_bytes(config, precision: str, padded: bool = True, lora_r: int = 0, seq_len: int = 0) -> float:
    """Bytes autograd keeps per token for one Qwen3 decoder layer (transformers' code, SDPA attention).

    Counted from the forward (``h`` hidden, ``Hq = heads x head_dim``, ``Hkv = kv_heads x head_dim``, ``I`` the MLP):

    * each RMSNorm keeps its input, the normalised tensor and (for the next linear) its output: fp32 ``3 x 4h``; in
      bf16 the input's fp32 copy, the normalised bf16 tensor and the output (``4h + 2h + 2h``); under autocast the
      fp32 input and normalised tensor, plus one bf16 copy of the output per linear that reads it (3 for q/k/v,
      2 for gate/up: autocast casts per call);
    * q and k norms keep their input (fp32 upcast) and normalised tensor; SDPA keeps q, k, v, the output (which is
      o_proj's input) and the log-sum-exp; with padding (an attention mask) transformers repeats k and v to all
      ``Hq`` heads first, without one it uses SDPA's grouped-query mode;
    * the SwiGLU MLP keeps gate, silu(gate), up and their product: ``4 I`` (with LoRA: a bf16 copy of the product
      instead of the product);
    * per-row scalars (norms' rsqrt, SDPA's log-sum-exp) in fp32;
    * with padding, the attention mask as SDPA receives it, one row of ``seq_len`` per token in each layer (fp32;
      bf16 for bf16 weights: measured on the CPU; on a GPU a bool mask becomes a bias in q's dtype).

    ``lora_r`` > 0: a LoRA adapter on the seven projections of a frozen base (PEFT, adapters in fp32). A frozen
    linear or norm weight needs no copy of its input for the backward, so the normalised tensors are not kept; each
    adapter keeps its input (under autocast, or with bf16 weights, a bf16 copy per adapter) and its ``r``-wide
    product.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    h, i = config.hidden_size, config.intermediate_size
    a, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    hq, hkv = a * d, kv * d
    hkv_sdpa = hq if padded else hkv              # k and v as SDPA receives them
    scalars = 4 * ((2 + a + kv) + a)              # rsqrt of 2 norms + q/k norms per head; SDPA's log-sum-exp
    if precision == "fp32":
        if lora_r:
            total = 4 * (4 * h + 3 * hq + hkv + 2 * hkv_sdpa + 4 * i) + 7 * 4 * lora_r + scalars
        else:
            total = 4 * (6 * h + 4 * hq + 2 * hkv + 2 * hkv_sdpa + 4 * i) + scalars
    elif lora_r:   # bf16 weights or autocast, frozen base: fp32 norm inputs, bf16 casts for the adapters
        total = 18 * h + 10 * hq + 4 * hkv + 4 * hkv_sdpa + 8 * i + 14 * lora_r + scalars
    elif precision == "bf16":
        total = 16 * h + 10 * hq + 6 * hkv + 4 * hkv_sdpa + 8 * i + scalars
    else:  # autocast: fp32 residual stream and norms, bf16 casts for every matmul
        total = 26 * h + 10 * hq + 6 * hkv + 4 * hkv_sdpa + 8 * i + scalars
    mask = (2 if precision == "bf16" else 4) * seq_len if padded else 0
    return total + mask


def model_extra_bytes(config, precision: str, batch: int = 1) -> float:
    """Bytes per token outside the decoder layers: the final norm, the LM head's input, the input ids, and RoPE's cos
    and sin (one per sequence position, shared by the ``batch``)."""
    h = config.hidden_size
    act = 4 if precision == "fp32" else 2
    norm = {"fp32": 8 * h, "bf16": 6 * h, "autocast": 8 * h}[precision] + 4
    rope = 2 * config.head_dim * (4 if precision != "bf16" else 2) / batch
    return norm + act * h + 8 + rope


def activation_bytes_per_token(config, precision: str, checkpointing: bool, seq_len: int, padded: bool = True,
                               lora_r: int = 0, batch: int = 1) -> float:
    """Activation bytes per token of a whole Qwen3 forward that gradients will flow through.

    Without checkpointing: every layer's :func:`layer_activation_bytes` plus :func:`model_extra_bytes`. With the
    Trainer's gradient checkpointing: each layer's input (the residual stream: 4 bytes a value for fp32 weights,
    autocast included; 2 in bf16), plus one layer's activations (rebuilt in the backward, one layer at a time) and
    the gradients of two ``I``-wide MLP tensors alive during its backward, plus the extras. Both measured on the CPU
    within a few percent (tests/test_memory.py).
    """
    layer = layer_activation_bytes(config, precision, padded, lora_r, seq_len)
    extra = model_extra_bytes(config, precision, batch)
    if not checkpointing:
        return config.num_hidden_layers * layer + extra
    residual = 2 if precision == "bf16" else 4
    return config.num_hidden_layers * config.hidden_size * residual + rebuilt_layer_bytes(config, precision, layer) \
        + extra


def rebuilt_layer_bytes(config, precision: str, layer: float) -> float:
    """What gradient checkpointing holds of the layer it rebuilds: its ``layer`` activation bytes (per token) and the
    gradients of two ``I``-wide tensors of its MLP backward (in the activations' dtype)."""
    return layer + 2 * config.intermediate_size * (4 if precision == "fp32" else 2)


def kv_cache_bytes(config, tokens: int, dtype_bytes: int) -> int:
    """KV cache of ``tokens`` (batch x (prompt + completion)): ``2 x layers x kv_heads x head_dim`` values each."""
    return tokens * 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * dtype_bytes


def logits_bytes(batch: int, seq_len: int, vocab: int = VOCAB_SIZE, bytes_per_element: float = 4) -> int:
    """One ``(B, T, V)`` logits tensor: ``B x T x V x bytes`` (4: the fp32 upcast a log-softmax is computed in).

    Multiply ``bytes_per_element`` by a code path's count of such tensors (``HF_LOSS_BYTES``, ...) for its peak.
    """
    return int(batch * seq_len * vocab * bytes_per_element)


def fused_logits_bytes(config, tokens: int, lm_head_trained: bool) -> int:
    """TRL 1.15's fused LM head (DPO, GRPO): one bf16 tile of ``min(tokens, 4096) x min(V, 32768)``, the scored
    tokens' hidden states in fp32 (kept for the backward) and their fp32 gradient, and, when the LM head (tied to the
    embedding) is trained, its fp32 gradient accumulator ``V x h``."""
    h, v = config.hidden_size, config.vocab_size
    tile = 2 * min(tokens, FUSED_TOKEN_CHUNK) * min(v, FUSED_VOCAB_CHUNK)
    return tile + 8 * tokens * h + (4 * v * h if lm_head_trained else 0)


# --------------------------------------------------------------------------- copies, phases, estimates
@dataclass(frozen=True)
class Copy:
    """One model copy: its parameters and bytes per parameter (weights; grads and optimizer moments when trained).

    ``trained`` parameters (all of them, a LoRA adapter's, or none) cost ``state_bytes`` each on top; an adapter's
    own weights are counted there too (``adapter``).
    """

    role: str
    params: int
    weight_bytes: float
    trained: int = 0
    state_bytes: float = 0.0
    adapter: int = 0

    @property
    def weights(self) -> float:
        return self.params * self.weight_bytes

    @property
    def state(self) -> float:
        return self.trained * self.state_bytes

    def label(self) -> str:
        """``role bytes``: bytes per parameter, weights and (when trained) grads and AdamW moments together."""
        per = f"{self.weight_bytes:g}"
        if self.trained and not self.adapter:
            per = f"{self.weight_bytes + self.state_bytes:g}"
        elif self.adapter:
            per += f" + LoRA {self.adapter / 1e6:.0f}M x {self.state_bytes:g}"
        return f"{self.role} {per}"


@dataclass(frozen=True)
class Phase:
    """What one part of a step holds beyond the copies: activations, logits, KV cache (bytes), with a short note."""

    name: str
    activations: float = 0.0
    logits: float = 0.0
    kv_cache: float = 0.0
    note: str = ""
    rebuilt: float = 0.0
    """the part of ``activations`` that gradient checkpointing rebuilds in the backward (one layer): the logits'
    backward is over before the first layer is rebuilt, so only the larger of the two counts at the peak"""

    @property
    def total(self) -> float:
        return self.activations + self.logits + self.kv_cache - min(self.rebuilt, self.logits)


@dataclass(frozen=True)
class Estimate:
    """The memory of one notebook's recipe on one model: copies, phases, and the peak (bytes; ``*_gib`` in GiB)."""

    notebook: str
    model: str
    params: int
    """parameters of the model the notebook starts from (09: the teacher; its student is tiny)"""
    copies: tuple[Copy, ...]
    phases: tuple[Phase, ...]
    settings: dict = field(default_factory=dict)
    note: str = ""

    @property
    def static(self) -> float:
        """Weights of every copy, plus grads and optimizer moments of the trained parameters (held across phases:
        05's loop frees its grads only at the next ``zero_grad``)."""
        return sum(c.weights + c.state for c in self.copies)

    @property
    def peak_phase(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def peak(self) -> float:
        return self.static + self.peak_phase.total

    @property
    def peak_gib(self) -> float:
        return self.peak / GIB

    def largest(self, term: str) -> float:
        """The largest ``term`` (``"activations"``, ``"logits"``, ``"kv_cache"``) over the phases, in bytes."""
        return max(getattr(p, term) for p in self.phases)

    def row(self) -> dict:
        """One table row, in GiB: each term at its largest over the phases (they need not be the same phase), and the
        peak, which adds only the largest phase's sum to the copies."""
        return {"notebook": self.notebook, "model": self.model.split("/")[-1],
                "parameters": f"{self.params / 1e9:.2f} B",
                "copies (bytes / parameter)": ", ".join(c.label() for c in self.copies),
                "weights + grads + AdamW (GiB)": self.static / GIB,
                "activations (GiB)": self.largest("activations") / GIB,
                "logits (GiB)": self.largest("logits") / GIB, "KV cache (GiB)": self.largest("kv_cache") / GIB,
                "peak (GiB)": self.peak_gib, "peak phase": self.peak_phase.name}


# --------------------------------------------------------------------------- the notebooks
NOTEBOOKS = {
    "02": ("02_sft", "sft"),
    "03": ("03_reward_model", "reward"),
    "05": ("05_ppo", "ppo"),
    "06": ("06_dpo", "dpo"),
    "07": ("07_grpo", "grpo"),
    "08": ("08_r1_pipeline", "grpo"),
    "09": ("09_distillation", "distill"),
    "11": ("11_qwen3_grpo_unsloth_vllm", "capstone"),
}


def gpu_profile(model_id: str = "Qwen/Qwen3-0.6B"):
    """The ``gpu`` profile's fields, built without CUDA (``get_profile("gpu")`` needs a GPU): for its recipes only."""
    from .run_config import Profile
    return Profile(name="gpu", model_id=model_id, seed=0, device="cuda", dtype=torch.bfloat16, max_new_tokens=256)


# unsloth-zoo 2026.10.9, vllm_utils.load_vllm (vLLM >= 0.11): a tenth of the card (GiB) at least this -> the share
STANDBY_TIERS = ((4.0, 0.925), (2.5, 0.9), (2.0, 0.825), (1.4, 0.8), (1.0, 0.775), (0.0, 0.75))
STANDBY_HEADROOM = 0.95


def vllm_standby_share(total_gib: float) -> float:
    """The share of a GPU's memory vLLM takes in notebook 11 (its weights, activations and KV cache).

    11 sets ``UNSLOTH_VLLM_STANDBY=1``; unsloth then replaces ``gpu_memory_utilization``, up or down, by a share
    chosen from the card's memory (:data:`STANDBY_TIERS` on a tenth of it, times 0.95 for vLLM >= 0.11), unless
    ``UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE=1``: 0.71 on a card under 10 GiB, 0.76 on a 15 GiB T4, 0.88 from 40 GiB up.
    The weights are the ones training uses (``fast_inference`` shares them); the KV cache stays allocated from the
    load through the priming SFT and the evaluations, and is freed only while GRPO trains between its generation
    steps (vLLM's sleep mode: TRL sleeps the engine when its ``GRPOTrainer`` starts and wakes it for each
    generation). The priming SFT therefore has what the share leaves.
    """
    tenth = total_gib * 0.1
    return next(share for floor, share in STANDBY_TIERS if tenth >= floor) * STANDBY_HEADROOM


def _key(notebook: str) -> str:
    key = str(notebook)[:2]
    if key not in NOTEBOOKS:
        raise ValueError(f"no memory model for notebook {notebook!r}; notebooks: {sorted(NOTEBOOKS)}")
    return key


def _update(name, config, precision, checkpointing, batch, seq_len, logits=0.0, lora_r=0, copies=1, extra=0.0,
            note="") -> Phase:
    """An update phase: activations of ``copies`` backbones that gradients flow through, over ``batch`` x ``seq_len``
    tokens (plus ``extra`` bytes, e.g. autocast's bf16 copies of trained weights), and ``logits``."""
    tokens = batch * seq_len
    per_token = activation_bytes_per_token(config, precision, checkpointing, seq_len, True, lora_r, batch)
    layer = layer_activation_bytes(config, precision, True, lora_r, seq_len)
    rebuilt = tokens * rebuilt_layer_bytes(config, precision, layer) if checkpointing else 0.0
    return Phase(name, copies * tokens * per_token + extra, logits, note=note, rebuilt=rebuilt)


def estimate(notebook: str, model_id: str = "Qwen/Qwen3-0.6B", *, config=None, recipe=None,
             prompt_tokens: int = PROMPT_TOKENS, generation_batch: int | None = None) -> Estimate:
    """The memory of ``notebook``'s GPU recipe on ``model_id`` (or on ``config``, e.g. a tiny one).

    Args:
        notebook: ``"02"``, ``"03"``, ``"05"``, ``"06"``, ``"07"``, ``"08"``, ``"09"`` or ``"11"`` (or a name
            starting with one).
        model_id: one of :data:`MODELS` (its sizes above), unless ``config`` is given.
        recipe: the recipe to size (default: ``recipes.recipe_for(stage, gpu profile)``, as the notebook runs it).
        prompt_tokens: prompt length of the RL and generation phases.
        generation_batch: sequences per generation call where the notebook samples outside its trainer (06's pairs:
            256; 09's teacher answers: 200).
    """
    from .recipes import recipe_for
    key = _key(notebook)
    name, stage = NOTEBOOKS[key]
    config = config if config is not None else qwen3_config(model_id)
    recipe = recipe if recipe is not None else recipe_for(stage, gpu_profile(model_id))
    n = parameter_count(config)
    n_score = parameter_count(config, head="score")
    v, p = config.vocab_size, prompt_tokens
    copies: list[Copy] = []
    phases: list[Phase] = []
    settings: dict = {"prompt_tokens": p}
    note = ""

    if key == "02":   # SFT of the bf16 hub model; the notebook keeps the pretrained model next to the trained copy
        b, t = recipe.batch_size, recipe.max_length
        copies = [Copy("policy", n, 2, n, 6), Copy("pretrained (kept)", n, 2)]
        phases = [_update("update", config, "bf16", True, b, t, logits_bytes(b, t, v, HF_LOSS_BYTES),
                          note="HF causal-LM loss on the full logits")]
        settings.update(batch=b, seq_len=t)
    elif key == "03":  # reward model: 16 pairs -> 32 sequences, a score head (no vocabulary logits)
        b, t = 2 * recipe.batch_size, recipe.max_length
        copies = [Copy("reward model", n_score, 2, n_score, 6)]
        phases = [_update("update", config, "bf16", True, b, t, note="a score head: no (B, T, V) logits")]
        settings.update(batch=b, seq_len=t)
    elif key == "05":  # the course's PPO: fp32 policy, critic and reference, 03's bf16 reward model held for section 7
        r, m, c = recipe.rollouts_per_step, recipe.minibatch_size, recipe.max_new_tokens
        t = p + c
        copies = [Copy("policy", n, 4, n, 12), Copy("value model", n_score, 4, n_score, 12),
                  Copy("reference", n, 4), Copy("reward model", n_score, 2)]
        phases = [
            Phase("rollout: generation", kv_cache=kv_cache_bytes(config, r * t, 4), note="generate, fp32 KV cache"),
            Phase("rollout: scoring", logits=max(logits_bytes(r, c, v, PPO_SCORING_BYTES),
                                                 logits_bytes(r, t, v, REFERENCE_BYTES)),
                  note="policy/value and reference passes over the whole rollout batch, no grad"),
            _update("update", config, "fp32", False, m, t, logits_bytes(m, c, v, PPO_UPDATE_BYTES), copies=2,
                    note="policy and critic backbones, fp32, no checkpointing"),
        ]
        settings.update(rollouts=r, minibatch=m, seq_len=t, completion=c)
    elif key == "06":  # DPO: fp32 policy (trained) and reference; TRL's fused LM head; self-generated pairs first
        b, t = 2 * recipe.batch_size, recipe.max_length
        g = generation_batch or 256
        copies = [Copy("policy", n, 4, n, 12), Copy("reference", n, 4)]
        phases = [
            Phase("pairs: generation", kv_cache=kv_cache_bytes(config, g * (p + recipe.max_new_tokens), 4),
                  note=f"{g} sampled answers at a time, fp32 KV cache"),
            _update("update", config, "autocast", True, b, t, fused_logits_bytes(config, b * t, True), extra=2 * n,
                    note="autocast, checkpointing; + bf16 casts of the trained weights"),
        ]
        settings.update(batch=b, seq_len=t, generation_batch=g)
    elif key in ("07", "08"):  # GRPO with LoRA on the fp32 policy; 08's second RL round adds 03's reward model in fp32
        b, c = recipe.prompts_per_step * recipe.num_generations, recipe.max_completion_length
        t, lora = p + c, lora_parameters(config, recipe.lora_r)
        copies = [Copy("policy (frozen base)", n, 4, lora, 16, adapter=lora)]
        if key == "08":
            copies.append(Copy("reward model", n_score, 4))
            note = "RL round 2 (R1-Zero and reasoning RL: the same without the reward model)"
        phases = [
            Phase("rollout: generation", kv_cache=kv_cache_bytes(config, b * t, 4), note="generate outside autocast"),
            _update("update", config, "autocast", True, b, t, fused_logits_bytes(config, b * c, False),
                    lora_r=recipe.lora_r, note="autocast, checkpointing, LoRA"),
        ]
        settings.update(batch=b, seq_len=t, completion=c, lora_r=recipe.lora_r)
    elif key == "09":  # GKD: fp32 teacher (02's SFT) and the tiny student on the model's vocabulary
        from .distill import STUDENT_SHAPE
        from .modeling import tiny_qwen3_config
        student = tiny_qwen3_config(config.vocab_size, **STUDENT_SHAPE)
        ns = parameter_count(student)
        b, t = recipe.batch_size, p + recipe.max_new_tokens
        g = generation_batch or 200
        copies = [Copy("student", ns, 4, ns, 12), Copy("teacher", n, 4)]
        phases = [
            Phase("teacher answers: generation", kv_cache=kv_cache_bytes(config, g * t, 4),
                  note=f"{g} prompts at a time, fp32 KV cache"),
            _update("GKD update", student, "autocast", True, b, t, logits_bytes(b, t, v, GKD_BYTES), extra=2 * ns,
                    note="student and teacher logits, JSD loss"),
        ]
        settings.update(batch=b, seq_len=t, generation_batch=g)
    elif key == "11":  # unsloth: bf16 base + LoRA (fp32 adapter, 8-bit AdamW); vLLM generates in its own reservation
        b, t = recipe.prompts_per_step * recipe.num_generations, 1024
        lora = lora_parameters(config, recipe.lora_r)
        state = 4 + (2 if recipe.optim == "adamw_8bit" else 8) + 4
        copies = [Copy("policy (frozen base)", n, 2, lora, state, adapter=lora)]
        phases = [_update("update", config, "bf16", True, b, t,
                          fused_logits_bytes(config, b * recipe.max_completion_length, False), lora_r=recipe.lora_r,
                          note="unsloth's checkpointing offloads to the CPU: less than counted")]
        settings.update(batch=b, seq_len=t, lora_r=recipe.lora_r)
        note = ("plus vLLM's share of the GPU's memory, which unsloth's standby mode chooses from the card's size "
                "(vllm_standby_share: 0.71-0.88), whatever gpu_memory_utilization says")
    return Estimate(name, model_id, n, tuple(copies), tuple(phases), settings, note)


def estimates(models=MODELS, notebooks=tuple(NOTEBOOKS), prompt_tokens: int = PROMPT_TOKENS) -> list[Estimate]:
    """:func:`estimate` for every pair of ``notebooks`` and ``models`` (notebook-major)."""
    return [estimate(nb, m, prompt_tokens=prompt_tokens) for nb in notebooks for m in models]


def rows(models=MODELS, notebooks=tuple(NOTEBOOKS), prompt_tokens: int = PROMPT_TOKENS) -> list[dict]:
    """:meth:`Estimate.row` of each estimate: the table as dicts."""
    return [e.row() for e in estimates(models, notebooks, prompt_tokens)]


def table(models=MODELS, notebooks=tuple(NOTEBOOKS), prompt_tokens: int = PROMPT_TOKENS) -> str:
    """The estimates as a Markdown table (``show.markdown_table``), GiB with three significant digits."""
    from .show import markdown_table
    data = rows(models, notebooks, prompt_tokens)
    return markdown_table({key: [r[key] for r in data] for key in data[0]})
