import torch

import course_utils
from course_utils.compat import DenseLogProbFunction, install_trl_cpu_fallback


def test_fallback_is_installed_where_triton_is_missing():
    import trl.trainer.utils as trl_utils
    assert trl_utils._ChunkedLogProbFunction is not None
    assert install_trl_cpu_fallback() in (True, False)
    assert course_utils.TRL_CPU_FALLBACK == (trl_utils._ChunkedLogProbFunction is DenseLogProbFunction)


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
