import pytest
import torch
import torch.nn.functional as F

from course_utils import losses

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_selective_log_softmax_matches_trl(dtype):
    from trl.trainer.utils import selective_log_softmax as trl_sls
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 50, generator=g, dtype=dtype) * 3
    index = torch.randint(0, 50, (3, 7), generator=g)
    ours = losses.selective_log_softmax(logits, index)
    assert ours.shape == (3, 7) and ours.dtype == dtype
    torch.testing.assert_close(ours, trl_sls(logits, index))
    naive = torch.gather(logits.log_softmax(-1), -1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours, naive)


def test_selective_log_softmax_shape_error():
    with pytest.raises(ValueError, match="disagree"):
        losses.selective_log_softmax(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_mean(dtype):
    values = torch.randn(4, 6, dtype=dtype)
    mask = torch.rand(4, 6) > 0.4
    mask[0] = False  # an all-masked row
    torch.testing.assert_close(losses.masked_mean(values, mask), values[mask].mean())
    per_row = losses.masked_mean(values, mask, dim=1)
    assert per_row[0] == 0
    for i in range(1, 4):
        if mask[i].any():
            torch.testing.assert_close(per_row[i], values[i][mask[i]].mean())
    with pytest.raises(ValueError):
        losses.masked_mean(values, mask[:, :3])


@pytest.mark.parametrize("dtype", DTYPES)
def test_sft_loss_matches_transformers(dtype):
    from transformers.loss.loss_utils import ForCausalLMLoss
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 9, 30, generator=g, dtype=dtype)
    labels = torch.randint(0, 30, (2, 9), generator=g)
    labels[0, :4] = -100   # a masked prompt
    labels[1, -2:] = -100  # padding
    ref = ForCausalLMLoss(logits, labels, vocab_size=30)
    torch.testing.assert_close(losses.sft_loss(logits, labels).float(), ref.float(), rtol=1e-5, atol=1e-6)
    assert losses.sft_loss(logits, labels).dtype == dtype
    flat = F.cross_entropy(logits[:, :-1].reshape(-1, 30).double(), labels[:, 1:].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(losses.sft_loss(logits, labels).double(), flat, rtol=1e-5, atol=1e-6)


def test_sft_loss_shape_error():
    with pytest.raises(ValueError, match="need logits"):
        losses.sft_loss(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("dtype", DTYPES)
def test_bradley_terry_matches_reference_formula(dtype):
    g = torch.Generator().manual_seed(2)
    chosen, rejected = torch.randn(16, generator=g, dtype=dtype), torch.randn(16, generator=g, dtype=dtype)
    # TRL RewardTrainer: -logsigmoid(chosen - rejected).mean();  equivalently softplus(rejected - chosen)
    torch.testing.assert_close(losses.bradley_terry_loss(chosen, rejected), F.softplus(rejected - chosen).mean())
    big = losses.bradley_terry_loss(torch.tensor([100.0]), torch.tensor([-100.0]))
    assert torch.isfinite(big) and big < 1e-30
    with pytest.raises(ValueError):
        losses.bradley_terry_loss(chosen, rejected[:3])


def test_completion_logps_matches_a_loop_over_positions(tokenizer):
    from course_utils import modeling
    from course_utils.losses import completion_logps
    model = modeling.build_model(tokenizer, seed=0)
    ids = torch.tensor([[3, 40, 41, 42, 43, 44], [0, 0, 50, 51, 52, 53]])   # row 2 left-padded
    attn = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    comp = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    got = completion_logps(model, ids, attn, comp, temperature=0.7)
    assert got.shape == (2, 6) and (got[comp == 0] == 0).all()
    for b in range(2):
        start = int((attn[b] == 0).sum())
        logits = model(input_ids=ids[b:b + 1, start:]).logits[0] / 0.7          # this row alone, no padding
        for t in range(6):
            if comp[b, t]:
                want = torch.log_softmax(logits[t - start - 1], -1)[ids[b, t]]
                torch.testing.assert_close(got[b, t], want, atol=1e-5, rtol=1e-5)



def test_mask_positions_count_attended_tokens():
    from course_utils.losses import mask_positions
    attn = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]])
    assert mask_positions(attn).tolist() == [[0, 1, 2, 3], [0, 0, 0, 1], [0, 1, 2, 2]]


def test_completion_logps_positions_on_learned_positions():
    """GPT-2 has learned absolute positions: a left-padded row matches the row alone only with positions="mask"."""
    from course_utils.losses import completion_logps
    from course_utils.modeling import family_model
    model, _ = family_model("gpt2")
    model.eval()   # its dropout is 0.1
    ids = torch.tensor([[0, 0, 50, 51, 52, 53]])
    attn = torch.tensor([[0, 0, 1, 1, 1, 1]])
    comp = torch.tensor([[0, 0, 0, 0, 1, 1]])
    alone = completion_logps(model, ids[:, 2:], attn[:, 2:], comp[:, 2:])
    torch.testing.assert_close(completion_logps(model, ids, attn, comp)[:, 2:], alone, atol=1e-5, rtol=1e-5)
    shifted = completion_logps(model, ids, attn, comp, positions="index")[:, 2:]   # TRL's GRPO numbering
    assert (shifted - alone).abs().max() > 1e-3
    with pytest.raises(ValueError, match="positions"):
        completion_logps(model, ids, attn, comp, positions="rope")

# --------------------------------------------------------------------------- distillation (notebook 09)
def _reference_soft_loss(student, teacher, temperature, mask):
    """Written out with explicit softmaxes and sums, in float64."""
    s, t, m = student.double().numpy(), teacher.double().numpy(), mask.double().numpy()
    import numpy as np

    def softmax(z):
        z = z - z.max(-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(-1, keepdims=True)
    p, q = softmax(t / temperature), softmax(s / temperature)
    kl = (p * (np.log(p) - np.log(q))).sum(-1)
    return temperature ** 2 * (kl * m).sum() / m.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0, 4.0])
def test_soft_distillation_loss_matches_a_reference_and_trl(dtype, temperature):
    import os
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.gkd import GKDTrainer
    g = torch.Generator().manual_seed(0)
    student = torch.randn(3, 5, 11, generator=g, dtype=dtype) * 3
    teacher = torch.randn(3, 5, 11, generator=g, dtype=dtype) * 3
    mask = (torch.rand(3, 5, generator=g) > 0.3).long()
    ours = losses.soft_distillation_loss(student, teacher, temperature, mask)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours.double(), torch.tensor(_reference_soft_loss(student, teacher, temperature, mask),
                                                           dtype=torch.float64), rtol=1e-5, atol=1e-6)
    # TRL: beta=0 is KL(teacher || student) at temperature T, mean over unmasked tokens, without the T^2 factor
    labels = torch.where(mask.bool(), torch.zeros_like(mask), torch.full_like(mask, -100))
    theirs = GKDTrainer.generalized_jsd_loss(student, teacher, labels=labels, beta=0.0, temperature=temperature)
    torch.testing.assert_close(ours, temperature ** 2 * theirs)


def test_soft_distillation_loss_properties():
    student = torch.randn(2, 4, 7, requires_grad=True)
    teacher = torch.randn(2, 4, 7, requires_grad=True)
    assert losses.soft_distillation_loss(teacher.detach(), teacher.detach(), 2.0) < 1e-6   # same logits: zero
    loss = losses.soft_distillation_loss(student, teacher, 2.0)
    assert loss > 0
    loss.backward()
    assert student.grad is not None and teacher.grad is None          # only the student learns
    unmasked = losses.soft_distillation_loss(student, teacher, 2.0, torch.ones(2, 4))
    torch.testing.assert_close(loss, unmasked)
    with pytest.raises(ValueError, match="temperature"):
        losses.soft_distillation_loss(student, teacher, 0.0)
    with pytest.raises(ValueError, match="shared vocabulary"):
        losses.soft_distillation_loss(student, teacher[..., :5], 1.0)


def test_soft_distillation_gradient_scale_does_not_vanish_with_temperature():
    """Why T²: without it the gradient shrinks like 1/T²; with it, it tends to a constant (Hinton et al., 2015)."""
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(64, 11, generator=g)
    norms = {}
    for t in (1.0, 4.0, 16.0):
        student = torch.zeros(64, 11, requires_grad=True)
        losses.soft_distillation_loss(student, teacher, t).backward()
        norms[t] = student.grad.norm().item()
    assert 0.5 < norms[16.0] / norms[4.0] < 2.0


def _reference_jsd(student, teacher, beta, temperature, mask):
    """Plain float64 loops: the generalised JSD per position, mean over mask (beta 0 / 1 exact KLs)."""
    s = (student.double() / temperature).log_softmax(-1).exp()
    t = (teacher.double() / temperature).log_softmax(-1).exp()
    total, count = 0.0, 0
    for idx in torch.nonzero(mask):
        p, q = t[tuple(idx)], s[tuple(idx)]
        if beta == 0:
            d = float((p * (p / q).log()).sum())
        elif beta == 1:
            d = float((q * (q / p).log()).sum())
        else:
            m = beta * p + (1 - beta) * q
            d = float(beta * (p * (p / m).log()).sum() + (1 - beta) * (q * (q / m).log()).sum())
        total, count = total + d, count + 1
    return total / count


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_generalized_jsd_matches_a_reference_and_trl(dtype, beta, temperature):
    import os
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.gkd import GKDTrainer
    g = torch.Generator().manual_seed(2)
    student = torch.randn(3, 5, 11, generator=g, dtype=dtype) * 2
    teacher = torch.randn(3, 5, 11, generator=g, dtype=dtype) * 2
    mask = (torch.rand(3, 5, generator=g) > 0.3).long()
    ours = losses.generalized_jsd(student, teacher, beta, temperature, mask)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours.double(), torch.tensor(_reference_jsd(student, teacher, beta, temperature, mask),
                                                           dtype=torch.float64), rtol=1e-5, atol=1e-6)
    labels = torch.where(mask.bool(), torch.zeros_like(mask), torch.full_like(mask, -100))
    theirs = GKDTrainer.generalized_jsd_loss(student, teacher, labels=labels, beta=beta, temperature=temperature)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_generalized_jsd_properties():
    student = torch.randn(2, 4, 7, requires_grad=True)
    teacher = torch.randn(2, 4, 7, requires_grad=True)
    for beta in (0.0, 0.5, 1.0):
        assert losses.generalized_jsd(teacher.detach(), teacher.detach(), beta) < 1e-6
    # beta = 0 is the soft-distillation KL without T^2
    torch.testing.assert_close(losses.generalized_jsd(student, teacher, 0.0, 3.0),
                               losses.soft_distillation_loss(student, teacher, 3.0) / 9.0)
    loss = losses.generalized_jsd(student, teacher, 0.5)
    loss.backward()
    assert student.grad is not None and teacher.grad is None
    with pytest.raises(ValueError, match="beta"):
        losses.generalized_jsd(student, teacher, 1.5)


def test_distillation_mix_loss_interpolates_soft_and_hard():
    g = torch.Generator().manual_seed(3)
    student = torch.randn(2, 6, 9, generator=g)
    teacher = torch.randn(2, 6, 9, generator=g)
    labels = torch.randint(0, 9, (2, 6), generator=g)
    labels[:, :2] = -100                                   # prompt positions
    mask = labels[:, 1:] != -100
    soft = losses.soft_distillation_loss(student[:, :-1], teacher[:, :-1], 2.0, mask)
    hard = losses.sft_loss(student, labels)
    torch.testing.assert_close(losses.distillation_mix_loss(student, teacher, labels, 1.0, 2.0), soft)
    torch.testing.assert_close(losses.distillation_mix_loss(student, teacher, labels, 0.0, 2.0), hard)
    torch.testing.assert_close(losses.distillation_mix_loss(student, teacher, labels, 0.3, 2.0), 0.3 * soft + 0.7 * hard)
    with pytest.raises(ValueError, match="alpha"):
        losses.distillation_mix_loss(student, teacher, labels, -0.1)


def test_hidden_state_loss():
    g = torch.Generator().manual_seed(4)
    teacher = torch.randn(2, 5, 8, generator=g)
    assert losses.hidden_state_loss(teacher, teacher) < 1e-9
    assert abs(float(losses.hidden_state_loss(torch.zeros(2, 5, 8), teacher)) - 1.0) < 1e-5   # relative error of 0
    scaled = losses.hidden_state_loss(2 * teacher, teacher)                                   # error = |h|^2 / |h|^2
    assert abs(float(scaled) - 1.0) < 1e-5
    mask = torch.zeros(2, 5)
    mask[0, 0] = 1
    student = torch.randn(2, 5, 8, generator=g, requires_grad=True)
    expected = ((student[0, 0] - teacher[0, 0]) ** 2).sum() / ((teacher[0, 0] ** 2).sum() + 1e-6)
    torch.testing.assert_close(losses.hidden_state_loss(student, teacher, mask), expected)
    with pytest.raises(ValueError, match="project"):
        losses.hidden_state_loss(torch.zeros(2, 5, 4), teacher)
