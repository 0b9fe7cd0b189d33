"""The course map and the English-Chinese glossary.

``NOTEBOOKS`` is the single source of the notebook map: notebook 00 renders it and
``tests/test_repo.py`` checks that the README's table says the same.
``GLOSSARY`` maps the English term to its Chinese term (as in the seed notes) and a
one-line meaning; notebooks link here with ``glossary_table([...])``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NotebookInfo:
    number: str
    slug: str
    title: str
    learn: str
    cpu_minutes: float

    @property
    def filename(self) -> str:
        return f"{self.number}_{self.slug}.ipynb"


# cpu_minutes: measured wall time on 2 CPU cores, rounded up (see build/RESULTS.md).
NOTEBOOKS = [
    NotebookInfo("00", "setup_and_map", "Setup and course map",
                 "check the environment, the pipeline Pretrain -> SFT -> RLHF, the glossary", 0.5),
    NotebookInfo("01", "pretrain", "Pretraining a tiny Qwen3",
                 "tokenizer, Qwen3 config, next-token loss from scratch and with Trainer", 3),
    NotebookInfo("02", "sft", "Supervised fine-tuning",
                 "chat template, loss mask, SFTTrainer, why SFT is not enough", 3),
    NotebookInfo("03", "reward_model", "Reward model",
                 "backbone + scalar head, Bradley-Terry loss, RewardTrainer", 3),
    NotebookInfo("04", "rl_foundations", "RL foundations",
                 "on/off-policy, importance sampling, Monte Carlo, MCTS/UCT, detach, advantage", 1),
]


def notebook_table() -> str:
    """The notebook map as a Markdown table (README and notebook 00)."""
    rows = ["| # | notebook | what you learn | CPU min |", "|---|---|---|---|"]
    rows += [f"| {nb.number} | [{nb.title}](notebooks/{nb.filename}) | {nb.learn} | {nb.cpu_minutes:g} |"
             for nb in NOTEBOOKS]
    return "\n".join(rows)


GLOSSARY: dict[str, tuple[str, str]] = {
    "pretraining": ("预训练", "next-token prediction on large unlabelled text; learns language and facts"),
    "supervised fine-tuning (SFT)": ("监督微调", "training on question/answer chats so the model answers as wanted"),
    "RLHF": ("人类反馈强化学习", "reinforcement learning from human feedback: optimise a policy for preferences"),
    "alignment (helpful, honest, harmless)": ("对齐（有用、真实、无害）", "making outputs match what people want"),
    "preference data (chosen / rejected)": ("偏好数据（好回答/坏回答）", "a prompt with a preferred and a dispreferred answer"),
    "reward model (RM)": ("奖励模型", "backbone + scalar head scoring how good an answer is"),
    "outcome reward model (ORM)": ("结果奖励模型", "scores only the final answer"),
    "process reward model (PRM)": ("过程奖励模型", "scores each reasoning step"),
    "backbone": ("基座/骨干网络", "the transformer body that turns text into features; heads sit on top"),
    "head (LM head, score head)": ("输出头（语言模型头、打分头）", "the last linear layer: to vocabulary logits or to a score"),
    "chat template": ("聊天模板", "how a list of messages becomes one token sequence"),
    "loss mask": ("损失掩码", "which tokens count in the loss (in SFT: the assistant's)"),
    "negative feedback": ("负反馈", "a signal that an output is bad; SFT has none"),
    "catastrophic forgetting": ("知识遗忘（灾难性遗忘）", "losing earlier skills while learning a new one"),
    "overfitting": ("过拟合", "fitting the training data at the cost of new data (repetition, no creativity)"),
    "policy": ("策略", "the model that chooses actions (tokens) given a state (the text so far)"),
    "actor / critic": ("演员/评论家（策略模型/价值模型）", "the policy, and the model that estimates values"),
    "reference model": ("参考模型", "a frozen copy of the starting policy, anchor of the KL penalty"),
    "KL divergence": ("KL散度", "how far one distribution is from another"),
    "on-policy": ("同策略", "learns only from samples of the current policy"),
    "off-policy": ("异策略", "learns from samples of another (older or behaviour) policy"),
    "importance sampling": ("重要性采样", "re-weight samples of q by p/q to estimate an expectation under p"),
    "probability ratio": ("概率比", "pi(a|s) / pi_old(a|s), the importance weight of PPO and GRPO"),
    "clipping": ("裁剪", "limiting the ratio to [1-eps, 1+eps] so one update cannot move too far"),
    "Monte Carlo method": ("蒙特卡洛方法", "estimating a quantity by random sampling"),
    "Monte Carlo estimate": ("蒙特卡洛估计", "an average over sampled paths instead of all paths; unbiased but noisy"),
    "Monte Carlo rollout": ("蒙特卡洛展开", "simulating from a state to the end with some policy"),
    "Monte Carlo tree search (MCTS)": ("蒙特卡洛树搜索", "selection, expansion, simulation, back-propagation"),
    "UCT (upper confidence bound for trees)": ("上置信界树搜索", "Q/N + C sqrt(ln T / N): value plus exploration bonus"),
    "cold start": ("冷启动", "new items or models with too little data to trust their statistics"),
    "advantage function": ("优势函数", "A = Q - V: how much better an action is than the average"),
    "value function": ("价值函数", "V(s): expected return from a state"),
    "baseline": ("基线", "a value subtracted from returns to reduce variance without bias"),
    "variance / bias": ("方差/偏差", "spread of an estimator / its systematic error"),
    "GAE (generalised advantage estimation)": ("广义优势估计", "advantage from TD errors, weighted by gamma*lambda"),
    "TD error": ("时序差分误差", "r + gamma V(s') - V(s)"),
    "PPO": ("近端策略优化", "proximal policy optimisation: clipped ratio, critic, KL to reference"),
    "DPO": ("直接偏好优化", "direct preference optimisation: preferences without a reward model or sampling"),
    "GRPO": ("组相对策略优化", "group relative policy optimisation: advantages from a group of samples"),
    "verifiable reward": ("可验证奖励", "a reward computed by a program (is the answer right?)"),
    "reward hacking": ("奖励作弊（奖励黑客）", "the policy exploits flaws of the reward instead of improving"),
    "closed-form problem": ("闭式解问题", "a problem with an exact answer that can be checked"),
    "in-context learning (ICL)": ("上下文学习", "learning from examples in the prompt, without weight updates"),
    "rejection sampling": ("拒绝采样", "sample many answers, keep only the good ones for further training"),
    "distillation": ("蒸馏", "a small student imitates a large teacher"),
    "teacher / student model": ("教师模型/学生模型", "the model imitated / the model that imitates"),
    "soft label / hard label": ("软标签/硬标签", "teacher's distribution / the ground-truth one-hot label"),
    "temperature": ("温度", "divides logits before softmax: >1 flattens, <1 sharpens"),
    "LoRA / PEFT": ("低秩适配/参数高效微调", "train small low-rank adapters instead of all weights"),
    "gradient / detach": ("梯度/梯度截断", "x - x.detach() has value 0 and gradient 1"),
}


def glossary_table(terms: list[str] | None = None) -> str:
    """The glossary (or the listed ``terms``) as a Markdown table."""
    keys = list(GLOSSARY) if terms is None else terms
    unknown = [k for k in keys if k not in GLOSSARY]
    if unknown:
        raise KeyError(f"not in the glossary: {unknown}")
    rows = ["| English | 中文 | meaning |", "|---|---|---|"]
    rows += [f"| {k} | {GLOSSARY[k][0]} | {GLOSSARY[k][1]} |" for k in keys]
    return "\n".join(rows)
