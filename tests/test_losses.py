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
