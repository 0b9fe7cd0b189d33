import subprocess
import sys

import torch

from course_utils.compat import DenseLogProbFunction, install_trl_cpu_fallback


def test_importing_the_package_imports_no_trl():
    """unsloth must be importable before trl: importing course_utils (or its data module) must not import trl."""
    code = ("import sys, course_utils, course_utils.data, course_utils.rl_basics; "
            "assert 'trl' not in sys.modules, 'trl imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fallback_replaces_a_missing_kernel_and_keeps_a_real_one(monkeypatch):
    import trl.trainer.utils as trl_utils
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", None)   # as on a machine without Triton
    assert install_trl_cpu_fallback() is True
    assert trl_utils._ChunkedLogProbFunction is DenseLogProbFunction
    sentinel = object()
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", sentinel)  # as where Triton works
    assert install_trl_cpu_fallback() is False
    assert trl_utils._ChunkedLogProbFunction is sentinel


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
