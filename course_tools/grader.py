"""Grading a student's functions (:mod:`course_tools.assignments`): named checks, a hint for each failure.

Each graded function has a list of checks. A check is a property with a name a student can act on ("masked
labels are left out of the mean", "a group of equal rewards gets advantage 0", "the teacher gets no gradient"):
values against the package's reference on random tensors of several shapes and dtypes, edge cases, gradients, and
for the training losses a **training smoke** — a few dozen optimizer steps of a toy problem (a bandit, a table of
logits) with the student's function in the loop, which must then solve it. A failed check prints its hint, never the
reference code. ``python -m course_tools.grader A2`` (``make grade ASSIGNMENT=A2``) grades
``assignments/a2_ppo/student.py`` (``--file`` another) and exits 0 only when every check passes.

A teacher grades a submission by pointing ``--file`` at it from their own clean clone: the checks live in the
package, not in the student's folder, so a student cannot edit them into passing.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from course_utils import losses
from .assignments import ASSIGNMENTS, default_root, load_student, reference
from course_utils.rewards import SEED_TAGS
from course_utils.show import markdown_rows


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable     # run(student_function, reference_function); raises AssertionError with what differs
    hint: str         # what to look at when it fails: the property, never the answer


@dataclass(frozen=True)
class Result:
    function: str
    check: str
    passed: bool
    message: str = ""


class Mismatch(AssertionError):
    pass


def _same(got, want, what: str, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """``got`` equals ``want`` (tensors, numbers or tuples of them, compared in float64)."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise Mismatch(f"{what}: expected {len(want)} outputs, got {type(got).__name__}")
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}, output {i}", atol, rtol)
        return
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"{what}: expected a tensor, got {type(got).__name__}")
        if got.shape != want.shape:
            raise Mismatch(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        g, w = got.detach().double(), want.detach().double()
        if not torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=False):
            worst = (g - w).abs().nan_to_num(float("inf")).max().item()
            raise Mismatch(f"{what}: values differ (largest difference {worst:.3g})")
        return
    if got is None or not math.isclose(float(got), float(want), abs_tol=atol, rel_tol=rtol):
        raise Mismatch(f"{what}: got {got}, expected {want}")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed: int = 0, dtype=torch.float32, scale: float = 1.0):
    return (torch.randn(*shape, generator=_gen(seed)) * scale).to(dtype)


def _both(student, ref, make_args: Callable, what: str, atol: float = 1e-5, seeds=range(3)) -> None:
    """Student and reference on the same fresh arguments (a new copy for each, so in-place edits cannot leak)."""
    for seed in seeds:
        (args_s, kwargs_s), (args_r, kwargs_r) = make_args(seed), make_args(seed)
        _same(student(*args_s, **kwargs_s), ref(*args_r, **kwargs_r), f"{what} (case {seed})", atol)


def _gradients(fn, make_args: Callable, wrt: tuple[int, ...]) -> list | None:
    """Gradients of the sum of ``fn``'s (first) output with respect to the arguments ``wrt``; None if it has none."""
    args, kwargs = make_args(0)
    for i in wrt:
        args[i].requires_grad_(True)
    out = fn(*args, **kwargs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return None
    grads = torch.autograd.grad(out.sum(), [args[i] for i in wrt], allow_unused=True)
    return [torch.zeros_like(args[i]) if g is None else g for i, g in zip(wrt, grads)]


def _grads(student, ref, make_args: Callable, wrt: tuple[int, ...], what: str, atol: float = 1e-5) -> None:
    """The gradients of (the first output of) both functions with respect to the arguments ``wrt`` agree."""
    got, want = _gradients(student, make_args, wrt), _gradients(ref, make_args, wrt)
    if got is None:
        raise Mismatch(f"{what}: no gradient reaches the inputs (a detach, or a value rebuilt outside autograd?)")
    for i, (g, w) in zip(wrt, zip(got, want)):
        _same(g, w, f"{what}: gradient of argument {i}", atol)


def _raises(fn, exc, what: str) -> None:
    try:
        fn()
    except exc:
        return
    except NotImplementedError:
        raise
    except Exception as err:  # noqa: BLE001 - the wrong kind of error is the finding
        raise Mismatch(f"{what}: raised {type(err).__name__}, expected {exc.__name__}") from None
    raise Mismatch(f"{what}: did not raise {exc.__name__}")


def _optimise(params, loss_fn: Callable[[], torch.Tensor], steps: int, lr: float) -> None:
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        if not torch.isfinite(loss):
            raise Mismatch(f"the loss became {loss.item()} during training")
        loss.backward()
        opt.step()


# ----------------------------------------------------------------------------------------------- sft_loss
def _sft_args(seed, shape=(3, 9, 11), masked=True, dtype=torch.float32, ignore=-100):
    b, t, v = shape
    logits = _randn(b, t, v, seed=seed, dtype=dtype, scale=2.0)
    labels = torch.randint(0, v, (b, t), generator=_gen(seed + 100))
    if masked:
        labels[:, : t // 3] = ignore                       # the prompt
        labels[0, -2:] = ignore                            # padding at the end of one row
    return (logits, labels), ({} if ignore == -100 else {"ignore_index": ignore})


def _sft_smoke(student, ref):
    logits = torch.zeros(2, 8, 6, requires_grad=True)
    labels = torch.randint(0, 6, (2, 8), generator=_gen(5))
    labels[:, :3] = -100
    _optimise([logits], lambda: student(logits, labels), steps=100, lr=0.3)
    predicted = logits[:, :-1].argmax(-1)
    keep = labels[:, 1:] != -100
    if not torch.equal(predicted[keep], labels[:, 1:][keep]):
        raise Mismatch("after 100 steps on one batch the logits still do not predict its next tokens")


SFT = [
    Check("plain next-token loss (no masked labels)", lambda s, r: _both(s, r, lambda k: _sft_args(k, masked=False),
          "no mask"), "position t predicts token t+1: drop the last logit row and the first label"),
    Check("masked labels are left out of the mean", lambda s, r: _both(s, r, _sft_args, "prompt and padding masked"),
          "average over the positions whose (shifted) label is not ignore_index, and only those"),
    Check("the ignore_index argument is used", lambda s, r: _both(s, r, lambda k: _sft_args(k, ignore=-1),
          "ignore_index=-1"), "compare labels with the ignore_index you are given, not a constant"),
    Check("one position, several shapes", lambda s, r: [_both(s, r, lambda k: _sft_args(k, shape=sh), f"shape {sh}")
          for sh in ((1, 2, 3), (4, 5, 7))], "a batch of one and a sequence of two are ordinary cases"),
    Check("bfloat16 logits", lambda s, r: _both(s, r, lambda k: _sft_args(k, dtype=torch.bfloat16), "bf16", atol=2e-2),
          "log-softmax in half precision loses digits: compute it in float32"),
    Check("gradient", lambda s, r: _grads(s, r, _sft_args, (0,), "d loss / d logits"),
          "the loss must stay a differentiable function of the logits"),
    Check("training smoke: fits one batch", lambda s, r: _sft_smoke(s, r),
          "minimising your loss must make the model predict the labels (check the sign and the shift)"),
]


# ----------------------------------------------------------------------------------------- bradley_terry_loss
def _bt_args(seed, n=16, scale=2.0):
    return (_randn(n, seed=seed, scale=scale), _randn(n, seed=seed + 50, scale=scale)), {}


def _bt_smoke(student, ref):
    r = torch.zeros(5, requires_grad=True)
    pairs = torch.tensor([(i, j) for i in range(5) for j in range(5) if i < j])   # a lower index is preferred
    _optimise([r], lambda: student(r[pairs[:, 0]], r[pairs[:, 1]]), steps=200, lr=0.1)
    if not bool((r[:-1] > r[1:]).all()):
        raise Mismatch(f"after training on 'lower index wins' pairs the rewards are not ordered: {r.tolist()}")


BT = [
    Check("values", lambda s, r: _both(s, r, _bt_args, "random rewards"),
          "-log sigmoid(r_chosen - r_rejected), averaged over the pairs"),
    Check("which answer is preferred", lambda s, r: _both(s, r, lambda k: ((torch.tensor([3.0]), torch.tensor([-1.0])),
          {}), "chosen 3, rejected -1"), "the chosen answer's reward comes first in the margin"),
    Check("large margins stay finite", lambda s, r: _both(s, r, lambda k: _bt_args(k, scale=500.0), "margins ~1000"),
          "log(sigmoid(x)) underflows for large |x|: use a numerically stable log-sigmoid"),
    Check("gradient", lambda s, r: _grads(s, r, _bt_args, (0, 1), "d loss / d rewards"),
          "the loss must stay differentiable in both rewards"),
    Check("training smoke: learns an order", lambda s, r: _bt_smoke(s, r),
          "minimising your loss on pairs must rank the preferred answers higher"),
]


# ----------------------------------------------------------------------------------------------- kl_estimate
def _kl_args(kind):
    return lambda seed: ((_randn(4, 7, seed=seed, scale=0.5) - 1.0, _randn(4, 7, seed=seed + 9, scale=0.5) - 1.0),
                         {"kind": kind})


def _kl_unbiased(student, ref):
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.25, 0.25, 0.25, 0.25])
    exact = (p * (p / q).log()).sum().item()
    tokens = torch.multinomial(p, 200_000, replacement=True, generator=_gen(0))
    for kind in ("k1", "k3"):
        est = student(p.log()[tokens], q.log()[tokens], kind=kind).mean().item()
        if abs(est - exact) > 0.01:
            raise Mismatch(f"{kind}'s mean over 200,000 samples of pi is {est:.4f}; KL(pi || pi_ref) is {exact:.4f}")


KL = [
    Check("k1", lambda s, r: _both(s, r, _kl_args("k1"), "k1"), "k1 = log pi - log pi_ref at the sampled token"),
    Check("k2", lambda s, r: _both(s, r, _kl_args("k2"), "k2"), "k2 = (log r)^2 / 2 with r = pi_ref / pi"),
    Check("k3", lambda s, r: _both(s, r, _kl_args("k3"), "k3"), "k3 = r - 1 - log r with r = pi_ref / pi"),
    Check("k1 and k3 estimate KL(pi || pi_ref)", lambda s, r: _kl_unbiased(s, r),
          "the samples come from pi: the ratio is pi_ref / pi, not its inverse"),
    Check("an unknown kind raises ValueError", lambda s, r: _raises(lambda: s(torch.zeros(2), torch.zeros(2),
          kind="k4"), ValueError, "kind='k4'"), "refuse a kind you do not know instead of returning nothing"),
]


# ------------------------------------------------------------------------------------------------------ gae
def _gae_args(gamma=1.0, lam=0.95, mask=False, dead_row=False):
    def make(seed):
        rewards, values = _randn(3, 6, seed=seed), _randn(3, 6, seed=seed + 7)
        kwargs = {"gamma": gamma, "lam": lam}
        if mask:
            m = torch.ones(3, 6)
            m[0, 4:] = 0
            m[1, 2:] = 0
            if dead_row:
                m[2] = 0
            kwargs["mask"] = m
        return (rewards, values), kwargs
    return make


def _gae_no_grad(student, ref):
    rewards, values = _randn(2, 4, seed=1), _randn(2, 4, seed=2).requires_grad_(True)
    out = student(rewards, values, gamma=0.9, lam=0.9)
    if any(isinstance(o, torch.Tensor) and o.requires_grad for o in out):
        raise Mismatch("the advantages or returns carry a gradient into the value head")


def _ppo_bandit(gae_fn, policy_fn, value_fn) -> None:
    """One-step bandit (4 actions, action 2 pays 1): PPO with a learned baseline must find action 2."""
    torch.manual_seed(0)
    logits, v = torch.zeros(4, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([logits, v], lr=0.05)
    gen = _gen(3)
    for _ in range(60):
        with torch.no_grad():
            actions = torch.multinomial(logits.softmax(-1), 64, replacement=True, generator=gen)
            old_logps = logits.log_softmax(-1)[actions].unsqueeze(1)
            rewards = (actions == 2).float().unsqueeze(1)
            old_values = v.expand(64, 1).clone()
            adv, ret = gae_fn(rewards, old_values, gamma=1.0, lam=1.0)
        mask = torch.ones(64, 1)
        for _ in range(2):
            logps = logits.log_softmax(-1)[actions].unsqueeze(1)
            p_loss, _ = policy_fn(logps, old_logps, adv, mask, 0.2)
            v_loss, _ = value_fn(v.expand(64, 1), old_values, ret, mask, 0.2)
            opt.zero_grad()
            (p_loss + v_loss).backward()
            opt.step()
    p = logits.softmax(-1)[2].item()
    if p < 0.8:
        raise Mismatch(f"after 60 PPO iterations the bandit's best action has probability {p:.2f} (needs >= 0.8)")


GAE = [
    Check("gamma = lambda = 1: reward-to-go minus V", lambda s, r: _both(s, r, _gae_args(1.0, 1.0), "gamma=lam=1"),
          "with gamma = lambda = 1 the advantage is the sum of the rewards from t on, minus V_t"),
    Check("lambda = 0: one-step TD error", lambda s, r: _both(s, r, _gae_args(1.0, 0.0), "lam=0"),
          "with lambda = 0 the advantage is r_t + gamma V_{t+1} - V_t: check which value you bootstrap from"),
    Check("general gamma and lambda", lambda s, r: _both(s, r, _gae_args(0.9, 0.8), "gamma=0.9, lam=0.8"),
          "A_t = delta_t + gamma lambda A_{t+1}, computed backwards; the value after the last position is 0"),
    Check("nothing after EOS counts (mask)", lambda s, r: _both(s, r, _gae_args(0.9, 0.95, mask=True), "masked"),
          "zero the rewards and values after each row's end first: the last real token bootstraps from 0"),
    Check("an all-masked row", lambda s, r: _both(s, r, _gae_args(0.9, 0.95, mask=True, dead_row=True), "dead row"),
          "a row with no real token has advantages and returns of 0"),
    Check("no gradient flows into the values", lambda s, r: _gae_no_grad(s, r),
          "advantages and returns are targets: detach the values"),
    Check("training smoke: PPO solves a bandit", lambda s, r: _ppo_bandit(s, REFERENCE["ppo_policy_loss"],
          REFERENCE["ppo_value_loss"]), "with your GAE, PPO must find the paying action"),
]


# ----------------------------------------------------------------------------------------- ppo_policy_loss
def _ppo_args(spread=0.5):
    def make(seed):
        logps = _randn(4, 6, seed=seed, scale=0.3) - 1.0
        old = logps + _randn(4, 6, seed=seed + 1, scale=spread)
        mask = torch.ones(4, 6)
        mask[1, 3:] = 0
        mask[3, 1:] = 0
        return (logps, old, _randn(4, 6, seed=seed + 2), mask), {"clip_range": 0.2}
    return make


PPO_POLICY = [
    Check("ratio 1: the loss is -mean A", lambda s, r: _both(s, r, _ppo_args(0.0), "logps = old_logps"),
          "at rho = 1 the surrogate is -A averaged over the real tokens"),
    Check("the clip, both signs of A", lambda s, r: _both(s, r, _ppo_args(0.5), "ratios far from 1"),
          "take the larger of -A rho and -A clip(rho): the pessimistic bound, for either sign of A"),
    Check("the ratio's direction", lambda s, r: _both(s, r, _ppo_args(0.05), "ratios near 1"),
          "rho = exp(log pi_theta - log pi_old)"),
    Check("clip fraction", lambda s, r: _same(s(*_ppo_args(0.5)(4)[0])[1], r(*_ppo_args(0.5)(4)[0])[1], "clipfrac"),
          "the share of real tokens where the clipped term is the larger loss"),
    Check("gradient (zero where the clip binds)", lambda s, r: _grads(s, r, _ppo_args(0.5), (0,), "d loss / d logps"),
          "only log pi_theta carries gradient; the clip must cut it where it binds"),
    Check("training smoke: PPO solves a bandit",
          lambda s, r: _ppo_bandit(REFERENCE["gae"], s, REFERENCE["ppo_value_loss"]),
          "with your policy loss, PPO must find the paying action"),
]


def _value_args(seed):
    values = _randn(4, 6, seed=seed)
    old = values + _randn(4, 6, seed=seed + 1, scale=0.4)
    mask = torch.ones(4, 6)
    mask[2, 2:] = 0
    return (values, old, _randn(4, 6, seed=seed + 2), mask), {"clip_range_value": 0.2}


PPO_VALUE = [
    Check("values", lambda s, r: _both(s, r, _value_args, "random values"),
          "0.5 x the masked mean of the larger of the two squared errors"),
    Check("the clip is around the old value", lambda s, r: _both(s, r, lambda k: ((torch.tensor([[0.5]]),
          torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.ones(1, 1)), {"clip_range_value": 0.2}),
          "V=0.5, V_old=0, R=1"),
          "clip the new value to V_old +- epsilon, then compare both errors against the return"),
    Check("clip fraction", lambda s, r: _same(s(*_value_args(3)[0])[1], r(*_value_args(3)[0])[1], "clipfrac"),
          "the share of real tokens where the clipped error is the larger"),
    Check("gradient", lambda s, r: _grads(s, r, _value_args, (0,), "d loss / d values"),
          "the loss must be differentiable in the new values only"),
    Check("training smoke: PPO solves a bandit",
          lambda s, r: _ppo_bandit(REFERENCE["gae"], REFERENCE["ppo_policy_loss"], s),
          "with your value loss, the baseline must learn and PPO find the paying action"),
]


# ------------------------------------------------------------------------------------------------ dpo_loss
def _dpo_args(scale=1.0):
    return lambda seed: (tuple(_randn(8, seed=seed + i, scale=scale) - 20.0 for i in range(4)), {"beta": 0.1})


def _dpo_smoke(student, ref):
    logits = torch.zeros(5, requires_grad=True)
    ref_logps = torch.full((5,), -math.log(5))
    rejected = torch.tensor([0, 1, 3, 4] * 4)
    chosen = torch.full_like(rejected, 2)

    def loss():
        logps = logits.log_softmax(-1)
        out = student(logps[chosen], logps[rejected], ref_logps[chosen], ref_logps[rejected], 0.5)
        return out[0].mean()
    _optimise([logits], loss, steps=150, lr=0.1)
    p = logits.softmax(-1)[2].item()
    if p < 0.8:
        raise Mismatch(f"after 150 steps on pairs that prefer answer 2 it has probability {p:.2f} (needs >= 0.8)")


def _dpo_detached(student, ref):
    args, kwargs = _dpo_args()(0)
    args[0].requires_grad_(True)
    out = student(*args, **kwargs)
    if any(isinstance(o, torch.Tensor) and o.requires_grad for o in out[1:]):
        raise Mismatch("the implicit rewards carry a gradient")


DPO = [
    Check("loss per pair", lambda s, r: _same(s(*_dpo_args()(0)[0], beta=0.1)[0], r(*_dpo_args()(0)[0], beta=0.1)[0],
          "losses"), "one loss per pair, -log sigmoid(r_w - r_l); not yet averaged"),
    Check("implicit rewards", lambda s, r: _both(s, r, _dpo_args(), "all outputs"),
          "r(y) = beta (log pi(y) - log pi_ref(y)), for the chosen and the rejected answer"),
    Check("implicit rewards are detached", lambda s, r: _dpo_detached(s, r),
          "the rewards are for logging and accuracy: detach them"),
    Check("large margins stay finite", lambda s, r: _both(s, r, _dpo_args(scale=3000.0), "margins in the hundreds"),
          "use a numerically stable log-sigmoid"),
    Check("gradient", lambda s, r: _grads(s, r, _dpo_args(), (0, 1), "d loss / d policy log-probs"),
          "the loss is differentiable in the policy's log-probs"),
    Check("training smoke: learns a preference", lambda s, r: _dpo_smoke(s, r),
          "minimising your loss must raise the preferred answer's probability"),
]


# ---------------------------------------------------------------------------------------- grpo_advantages
def _adv_args(scale):
    return lambda seed: ((torch.randint(0, 3, (24,), generator=_gen(seed)).float(), 8), {"scale": scale})


def _grpo_toy(adv_fn, loss_fn, loss_type="dapo", beta=0.04):
    """Four prompts, each with a best of 5 answers: GRPO with groups of 8 must learn each prompt's best."""
    torch.manual_seed(0)
    logits = torch.zeros(4, 5, requires_grad=True)
    ref = torch.full((4, 5), -math.log(5))
    best = torch.tensor([0, 2, 4, 1])
    opt = torch.optim.Adam([logits], lr=0.1)
    gen = _gen(1)
    for _ in range(60):
        with torch.no_grad():
            prompts = torch.arange(4).repeat_interleave(8)
            answers = torch.multinomial(logits.softmax(-1)[prompts], 1, generator=gen).squeeze(1)
            adv = adv_fn((answers == best[prompts]).float(), 8, scale="group")
        logps = logits.log_softmax(-1)[prompts, answers].unsqueeze(1)
        loss = loss_fn(logps, None, ref[prompts, answers].unsqueeze(1), adv, torch.ones(32, 1), beta=beta,
                       loss_type=loss_type, max_completion_length=1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    p = logits.softmax(-1).gather(1, best.unsqueeze(1)).mean().item()
    if p < 0.8:
        raise Mismatch(f"after 60 GRPO steps the best answers have probability {p:.2f} on average (needs >= 0.8)")


ADV = [
    Check("group scale", lambda s, r: _both(s, r, _adv_args("group"), "scale='group'"),
          "subtract each group's mean and divide by its standard deviation (+ 1e-4)"),
    Check("unbiased std", lambda s, r: _both(s, r, lambda k: ((torch.tensor([0.0, 1.0, 1.0, 1.0]), 4),
          {"scale": "group"}), "one group [0, 1, 1, 1]"), "the standard deviation is the unbiased one (n - 1)"),
    Check("a group of equal rewards gets 0", lambda s, r: _both(s, r, lambda k: ((torch.tensor([1.0] * 4 + [0.0, 1.0,
          0.0, 0.0]), 4), {"scale": "group"}), "an all-equal group"), "std 0 must not divide by zero: add the 1e-4"),
    Check("batch and none scales",
          lambda s, r: [_both(s, r, _adv_args(sc), f"scale={sc!r}") for sc in ("batch", "none")],
          "'batch': one std over the whole batch, still each group's mean; 'none': no division"),
    Check("a batch of partial groups raises", lambda s, r: _raises(lambda: s(torch.zeros(10), 4), ValueError,
          "10 rewards in groups of 4"), "check that the rewards split into whole groups"),
    Check("training smoke: GRPO learns", lambda s, r: _grpo_toy(s, REFERENCE["grpo_loss"]),
          "with your advantages, GRPO must learn each prompt's best answer"),
]


# ---------------------------------------------------------------------------------------------- grpo_loss
# the sampler's importance weight as losses.sampler_is_weight makes it, one per TRL mode: per token (B, T) or per
# completion (B, 1), bounded above by 3; the "mask" modes drop tokens or whole completions (weight 0)
IS_WEIGHT_KINDS = ("token_truncate", "sequence_truncate", "token_mask", "sequence_mask")


def _gl_weight(kind, seed):
    shape = (4, 6) if kind.startswith("token") else (4, 1)
    weight = torch.exp(_randn(*shape, seed=seed + 5, scale=0.6)).clamp(max=3.0)
    if kind == "token_mask":
        weight[1, 0] = weight[3, 2] = 0.0                  # two tokens of full-length completions dropped
    if kind == "sequence_mask":
        weight[1] = 0.0                                    # a whole completion dropped
    return weight


def _gl_args(off_policy=True, beta=0.0, is_weight=None, **kw):
    def make(seed):
        logps = _randn(4, 6, seed=seed, scale=0.3) - 1.0
        old = (logps + _randn(4, 6, seed=seed + 1, scale=0.3)) if off_policy else None
        ref = logps + _randn(4, 6, seed=seed + 2, scale=0.3)
        mask = torch.ones(4, 6)
        mask[0, 2:] = 0
        mask[2, 4:] = 0
        weight = {} if is_weight is None else {"is_weight": _gl_weight(is_weight, seed)}
        return (logps, old, ref, _randn(4, seed=seed + 3), mask), {"beta": beta, "max_completion_length": 6, **kw,
                                                                    **weight}
    return make


def _gl_weighted(student, ref, kinds, levels=("token",), loss_types=("dapo",), **kw):
    """Student and reference with the sampler's weight, over every combination of weight kind, level and loss type."""
    for kind in kinds:
        for level in levels:
            for loss_type in loss_types:
                _both(student, ref, _gl_args(is_weight=kind, importance_sampling_level=level, loss_type=loss_type,
                                             **kw), f"is_weight {kind}, {level} level, {loss_type}")


GRPO = [
    Check("on-policy (old_logps None): value and gradient", lambda s, r: (_both(s, r, _gl_args(False), "on-policy"),
          _grads(s, r, _gl_args(False), (0,), "on-policy")),
          "pi_old = pi_theta detached: rho is 1 in value but its gradient is grad log pi"),
    Check("the clip, with epsilon_high", lambda s, r: _both(s, r, _gl_args(epsilon_low=0.2, epsilon_high=0.28),
          "epsilon 0.2 / 0.28"), "clip rho to [1 - epsilon_low, 1 + epsilon_high]; take the pessimistic term"),
    Check("loss types", lambda s, r: [_both(s, r, _gl_args(loss_type=t), t) for t in losses.GRPO_LOSS_TYPES],
          "grpo: mean per completion, then over completions; bnpo/dapo: over all real tokens; "
          "dr_grpo: sum / (B x max_completion_length)"),
    Check("the KL term", lambda s, r: [_both(s, r, _gl_args(beta=0.1, use_bias_correction_kl=b), f"beta 0.1, "
          f"bias correction {b}") for b in (True, False)],
          "beta x k3 per token (k3 of pi_ref / pi), times rho when the bias correction is on"),
    Check("sequence-level ratio (GSPO)", lambda s, r: _both(s, r, _gl_args(importance_sampling_level="sequence",
          epsilon_low=3e-4, epsilon_high=4e-4), "sequence level"),
          "one ratio per completion: exp of the mean of its real tokens' log-ratios"),
    Check("gradient", lambda s, r: _grads(s, r, _gl_args(beta=0.1), (0,), "d loss / d logps"),
          "only the current log-probs carry gradient"),
    Check("the sampler's weight (is_weight)", lambda s, r: _gl_weighted(s, r, IS_WEIGHT_KINDS[:2]),
          "is_weight ((B, T) or (B, 1)) multiplies each token's clipped policy-gradient loss, after the clip"),
    Check("the sampler's weight and the KL term", lambda s, r: [_gl_weighted(s, r, IS_WEIGHT_KINDS[:2], beta=0.1,
          use_bias_correction_kl=b) for b in (True, False)],
          "is_weight multiplies the policy-gradient term only: the KL term is added after, unweighted"),
    Check("the sampler's weight under every loss type", lambda s, r: _gl_weighted(s, r, IS_WEIGHT_KINDS, beta=0.04,
          loss_types=losses.GRPO_LOSS_TYPES),
          "the weight changes each token's loss, never the normaliser: a token or completion it drops (weight 0) "
          "still counts in each loss type's normaliser, as the mask says"),
    Check("the sampler's weight at sequence level (GSPO)", lambda s, r: _gl_weighted(s, r, IS_WEIGHT_KINDS,
          levels=("sequence",), loss_types=losses.GRPO_LOSS_TYPES, beta=0.04),
          "with one ratio per completion, is_weight still multiplies each token's policy-gradient loss"),
    Check("training smoke: GRPO learns", lambda s, r: _grpo_toy(REFERENCE["grpo_advantages"], s),
          "with your loss, GRPO must learn each prompt's best answer"),
]


# ------------------------------------------------------------------------------------- soft_distillation_loss
def _sd_args(temperature=1.0, mask=False):
    def make(seed):
        kwargs = {"temperature": temperature}
        if mask:
            m = torch.ones(3, 5)
            m[1, 2:] = 0
            kwargs["mask"] = m
        return (_randn(3, 5, 9, seed=seed, scale=2.0), _randn(3, 5, 9, seed=seed + 4, scale=2.0)), kwargs
    return make


def _sd_teacher_frozen(student, ref):
    s_logits, t_logits = _randn(2, 3, 5, seed=0), _randn(2, 3, 5, seed=1).requires_grad_(True)
    out = student(s_logits.requires_grad_(True), t_logits, temperature=2.0)
    grad = torch.autograd.grad(out, [t_logits], allow_unused=True)[0]
    if grad is not None and grad.abs().max() > 0:
        raise Mismatch("the teacher's logits receive a gradient")


def _sd_smoke(student, ref):
    teacher = _randn(4, 7, seed=3, scale=2.0)
    logits = torch.zeros(4, 7, requires_grad=True)
    _optimise([logits], lambda: student(logits, teacher, temperature=2.0), steps=200, lr=0.1)
    p, q = teacher.softmax(-1), logits.softmax(-1)
    kl = (p * (p.log() - q.log())).sum(-1).mean().item()
    if kl > 0.01:
        raise Mismatch(f"after 200 steps toward a teacher the student's KL to it is {kl:.3f} (needs <= 0.01)")


SOFT = [
    Check("T = 1", lambda s, r: _both(s, r, _sd_args(1.0), "T=1"), "KL(teacher || student) per position, averaged"),
    Check("the temperature and its T^2", lambda s, r: _both(s, r, _sd_args(3.0), "T=3"),
          "divide both logits by T before the softmax, and multiply the loss by T^2"),
    Check("masked positions", lambda s, r: _both(s, r, _sd_args(2.0, mask=True), "masked"),
          "average over the positions the mask keeps"),
    Check("the teacher gets no gradient", lambda s, r: _sd_teacher_frozen(s, r), "detach the teacher's logits"),
    Check("gradient", lambda s, r: _grads(s, r, _sd_args(2.0), (0,), "d loss / d student logits"),
          "the loss is differentiable in the student's logits"),
    Check("training smoke: matches a teacher", lambda s, r: _sd_smoke(s, r),
          "minimising your loss must bring the student's distribution to the teacher's"),
]


# ------------------------------------------------------------------------------------------- accuracy_reward
def _acc_cases():
    completions = ["<think>2+2</think><answer>4</answer>", "<think>x</think><answer>5</answer>",
                   "<answer> 1,024 </answer>", "<answer>0.5</answer>", "<answer>7</answer><answer>8</answer>",
                   [{"role": "assistant", "content": "<think>a</think><answer>12</answer>"}], "no tags at all: 4",
                   "<answer>4", "<answer></answer>", "<answer>" + "9" * 100 + "</answer>", None]
    answers = ["4", "4", "1024", "1/2", "7", "12", "4", "4", "", "9" * 100, "3"]
    return completions, answers


def _acc_never_raises(student, ref):
    odd = [None, 12, b"<answer>3</answer>", {"content": "<answer>3</answer>"}, [], "<answer>" * 5000, "\x00<answer>3",
           float("nan"), ["<answer>3</answer>"], "</answer>3<answer>"]
    try:
        out = student(odd, answer=["3"] * len(odd))
    except NotImplementedError:
        raise
    except Exception as err:  # noqa: BLE001
        raise Mismatch(f"raised {type(err).__name__} on an odd completion: reward functions must never raise") from None
    if not (isinstance(out, list) and len(out) == len(odd) and all(isinstance(x, float) for x in out)):
        raise Mismatch("must return one float per completion")


def _acc(fn, which=slice(None), answers=None):
    completions, refs = _acc_cases()
    return fn(completions[which], answer=refs[which] if answers is None else answers)


ACC = [
    Check("right and wrong answers", lambda s, r: _same(_acc(s, slice(0, 2)), [1.0, 0.0], "scores"),
          "1.0 where the answer block holds the reference answer, else 0.0"),
    Check("equal numbers written differently", lambda s, r: _same(_acc(s, slice(2, 4)), [1.0, 1.0],
          "1,024 = 1024 and 0.5 = 1/2"), "compare values, not strings (the rewards module's answers_equal does)"),
    Check("the first answer block counts", lambda s, r: _same(_acc(s, slice(4, 5)), [1.0], "two answer blocks"),
          "read the first <answer>...</answer> block"),
    Check("every shape of completion and odd answers", lambda s, r: _same(_acc(s), _acc(r), "all cases"),
          "chat lists (the last message's content), missing or unclosed tags, empty and absurdly long answers"),
    Check("the tags argument is used", lambda s, r: _same(s(["<SOLUTION>12</SOLUTION>", "<answer>12</answer>"],
          answer=["12", "12"], tags=SEED_TAGS), [1.0, 0.0], "the seed's tags (notebook 11)"),
          "read the answer between tags.answer_open and tags.answer_close, not the course's tags written in"),
    Check("never raises on model output", lambda s, r: _acc_never_raises(s, r),
          "a reward function sees anything a model writes: it must return 0.0, not raise"),
    Check("a missing answer column raises ValueError", lambda s, r: _raises(lambda: s(["<answer>1</answer>"]),
          ValueError, "no answer column"), "without the column every score would be 0: say so loudly"),
    Check("mismatched lengths raise ValueError", lambda s, r: _raises(lambda: s(["a", "b"], answer=["1"]),
          ValueError, "2 completions, 1 answer"), "one reference answer per completion"),
]


CHECKS: dict[str, list[Check]] = {
    "sft_loss": SFT, "bradley_terry_loss": BT, "kl_estimate": KL, "gae": GAE, "ppo_policy_loss": PPO_POLICY,
    "ppo_value_loss": PPO_VALUE, "dpo_loss": DPO, "grpo_advantages": ADV, "grpo_loss": GRPO,
    "soft_distillation_loss": SOFT, "accuracy_reward": ACC,
}
# the package's own functions, even in student mode (COURSE_IMPL=student), where the modules hold the student's
REFERENCE = {g.name: reference(g) for a in ASSIGNMENTS.values() for g in a.functions}


def grade_function(name: str, func: Callable) -> list[Result]:
    """Run every check of ``name`` on ``func``: one :class:`Result` each, with the hint where it failed."""
    results = []
    for check in CHECKS[name]:
        try:
            torch.manual_seed(0)
            check.run(func, REFERENCE[name])
            results.append(Result(name, check.name, True))
        except NotImplementedError as err:
            results.append(Result(name, check.name, False, str(err) or "not written yet"))
        except Mismatch as err:
            results.append(Result(name, check.name, False, f"{err} — {check.hint}"))
        except Exception as err:  # noqa: BLE001 - a crash is a failed check, reported with the hint
            results.append(Result(name, check.name, False, f"raised {type(err).__name__}: {err} — {check.hint}"))
    return results


def grade(key: str, path: str | Path | None = None) -> list[Result]:
    """Grade assignment ``key``'s functions from ``path`` (default: its ``student.py`` in the assignments folder)."""
    if key not in ASSIGNMENTS:
        raise ValueError(f"unknown assignment {key!r}; choose one of {sorted(ASSIGNMENTS)}")
    assignment = ASSIGNMENTS[key]
    path = Path(path) if path is not None else default_root() / assignment.folder / "student.py"
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: run `make assignments` first (or pass --file)")
    module = load_student(path)
    results = []
    for g in assignment.functions:
        func = getattr(module, g.name, None)
        if func is None:
            results += [Result(g.name, c.name, False, f"{path.name} defines no {g.name}") for c in CHECKS[g.name]]
        else:
            results += grade_function(g.name, func)
    return results


def score(results: list[Result]) -> float:
    """The mean over functions of the share of their checks passed."""
    by = {}
    for r in results:
        by.setdefault(r.function, []).append(r.passed)
    return sum(sum(v) / len(v) for v in by.values()) / len(by)


def report(results: list[Result]) -> str:
    """A Markdown table per function (checks passed, score) and each failure with its hint."""
    by = {}
    for r in results:
        by.setdefault(r.function, []).append(r)
    rows = [(f"`{f}`", f"{sum(r.passed for r in rs)} / {len(rs)}", f"{sum(r.passed for r in rs) / len(rs):.0%}")
            for f, rs in by.items()]
    rows.append(("**total**", f"{sum(r.passed for r in results)} / {len(results)}", f"**{score(results):.0%}**"))
    failures = [f"- `{r.function}` · {r.check}: {r.message}" for r in results if not r.passed]
    return (markdown_rows(("function", "checks passed", "score"), rows)
            + ("\n\nFailed:\n" + "\n".join(failures) if failures else "\n\nEvery check passed.") + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("assignment", choices=sorted(ASSIGNMENTS))
    parser.add_argument("--file", type=Path, default=None, help="a student.py to grade (default: the assignment's)")
    args = parser.parse_args(argv)
    results = grade(args.assignment, args.file)
    print(report(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
