"""The course map and the English-Chinese glossary.

``NOTEBOOKS`` is the single source of the notebook names, built and planned: the README's
map and notebook 00 render it with :func:`notebook_table`, ``plotting.plot_pipeline`` labels
its boxes from it, ``stages`` names artifacts folders with :func:`notebook_name`, and
``tests/test_repo.py`` checks it against ``notebooks/`` and the README.
``GLOSSARY`` maps the English term to its Chinese term (as in the seed notes) and a
one-line meaning; notebooks link here with ``glossary_table([...])``. Table cells escape
``|`` (as in ``π(a|s)``), which would otherwise split a cell in two.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NotebookInfo:
    """One notebook of the course, built or planned.

    Attributes:
        number: two digits, ``"02"``; the order of the course.
        slug: the rest of the file stem, ``"sft"``.
        title: the title in the notebook map.
        short: the label of its box in :func:`course_utils.plotting.plot_pipeline`.
        learn: what it teaches, one line.
        cpu_minutes: wall time on 2 CPU cores, rounded up; ``None`` where not measured yet
            (a planned notebook) or where it needs a GPU.
        built: True where ``notebooks/<name>.ipynb`` exists; False for a planned notebook.
    """

    number: str
    slug: str
    title: str
    short: str
    learn: str
    cpu_minutes: float | None
    built: bool = True

    @property
    def name(self) -> str:
        """``"02_sft"``: the notebook's file stem, also its artifacts folder."""
        return f"{self.number}_{self.slug}"

    @property
    def filename(self) -> str:
        return f"{self.name}.ipynb"


# cpu_minutes: measured wall time on 2 CPU cores, rounded up (see build/RESULTS.md);
# None for the planned notebooks until they exist and are measured.
NOTEBOOKS = [
    NotebookInfo("00", "setup_and_map", "Setup and course map", "Setup",
                 "check the environment, the pipeline Pretrain -> SFT -> RLHF, the glossary", 0.5),
    NotebookInfo("01", "pretrain", "Pretraining a tiny Qwen3", "Pretrain",
                 "tokenizer, Qwen3 config, next-token loss from scratch and with Trainer", 4),
    NotebookInfo("02", "sft", "Supervised fine-tuning", "SFT",
                 "chat template, loss mask, SFTTrainer, the cold start, why SFT is not enough", 5),
    NotebookInfo("03", "reward_model", "Reward model", "Reward model",
                 "backbone + scalar head, Bradley-Terry loss, RewardTrainer", 3),
    NotebookInfo("04", "rl_foundations", "RL foundations", "RL foundations",
                 "on/off-policy, importance sampling, Monte Carlo, MCTS/UCT, detach, advantage", 2),
    NotebookInfo("05", "ppo", "PPO: proximal policy optimisation", "PPO",
                 "policy, reference, reward model and critic; clipped ratio, GAE, KL penalty, reward hacking", 5),
    NotebookInfo("06", "dpo", "DPO: direct preference optimisation", "DPO",
                 "the DPO loss from the KL-regularised objective; offline vs self-generated pairs, IPO, SimPO, "
                 "what goes wrong", 9),
    NotebookInfo("07", "grpo", "GRPO: group relative policy optimisation", "GRPO",
                 "group-relative advantages without a critic, verifiable rewards, GRPOTrainer + LoRA; Dr. GRPO, DAPO, "
                 "GSPO; reward hacking and troubleshooting", 8),
    NotebookInfo("08", "r1_pipeline", "The DeepSeek-R1 recipe, every stage run", "R1 pipeline",
                 "R1-Zero from the base; cold start, reasoning RL with a consistency reward, rejection sampling, SFT "
                 "with non-reasoning data, RL again; what R1 dropped", 8),
    NotebookInfo("09", "distillation", "Distillation: a student a sixth the teacher's size", "Distillation",
                 "soft and hard labels, temperature, T²·KL and the generalised JSD; sequence-level (R1-Distill), "
                 "logit (GKD, off- and on-policy) and hidden-state distillation", 3),
    NotebookInfo("10", "inference_scaling", "Inference-time scaling", "Inference scaling",
                 "spending compute at test time: pass@N, majority vote, best-of-N with a reward model, votes over "
                 "paraphrases, a process reward model in miniature, a DeepSeek-GRM-style generative judge with a meta RM",
                 4),
    NotebookInfo("11", "qwen3_grpo_unsloth_vllm", "Qwen3 GRPO with unsloth and vLLM", "Qwen3 GRPO (GPU)",
                 "the seed's recipe completed: unsloth + vLLM on a GPU (the tiny Qwen3 with TRL + PEFT on a CPU), "
                 "reasoning-tag template, format priming, GRPO on the seed's rewards, API drift, scripts and "
                 "accelerate configs for many GPUs", 2),
]


def notebook_name(number: str) -> str:
    """The name (file stem) of notebook ``number``: ``notebook_name("02") == "02_sft"``."""
    for nb in NOTEBOOKS:
        if nb.number == number:
            return nb.name
    raise ValueError(f"no notebook {number!r}; notebooks: {[nb.number for nb in NOTEBOOKS]}")


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: an unescaped ``|`` would start a new cell."""
    return text.replace("|", r"\|")


def notebook_table(link_prefix: str = "notebooks/", planned: bool = True) -> str:
    """The notebook map as a Markdown table.

    Args:
        link_prefix: the path from the page showing the table to the notebooks: ``"notebooks/"``
            in the README, ``""`` in a notebook (notebook 00).
        planned: also list the planned notebooks, without a link and marked *coming*.
    """
    rows = ["| # | notebook | what you learn | CPU min |", "|---|---|---|---|"]
    for nb in NOTEBOOKS:
        if nb.built:
            title = f"[{_cell(nb.title)}]({link_prefix}{nb.filename})"
        elif planned:
            title = f"{_cell(nb.title)} *(coming)*"
        else:
            continue
        minutes = "–" if nb.cpu_minutes is None else f"{nb.cpu_minutes:g}"
        rows.append(f"| {nb.number} | {title} | {_cell(nb.learn)} | {minutes} |")
    return "\n".join(rows)


GLOSSARY: dict[str, tuple[str, str]] = {
    "pretraining": ("预训练", "next-token prediction on large unlabelled text; learns language and facts"),
    "supervised fine-tuning (SFT)": ("监督微调", "training on question/answer chats so the model answers as wanted"),
    "RLHF": ("人类反馈强化学习", "reinforcement learning from human feedback: optimise a policy against a reward "
             "learned from human preferences (loosely: any preference-based alignment, DPO included)"),
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
    "probability ratio": ("概率比", "ρ = π(a|s) / π_old(a|s), the importance weight of PPO and GRPO"),
    "clipping": ("裁剪", "PPO's clipped objective min(ρA, clip(ρ, 1-ε_clip, 1+ε_clip)A) removes the incentive to push "
                 "the ratio ρ beyond 1±ε_clip in the direction the advantage favours; the ratio itself is not bounded"),
    "Monte Carlo method": ("蒙特卡洛方法", "estimating a quantity by random sampling"),
    "Monte Carlo estimate": ("蒙特卡洛估计", "an average over sampled paths instead of all paths; unbiased but noisy"),
    "Monte Carlo rollout": ("蒙特卡洛展开", "simulating from a state to the end with some policy"),
    "Monte Carlo tree search (MCTS)": ("蒙特卡洛树搜索", "selection, expansion, simulation, back-propagation"),
    "UCT (upper confidence bound for trees)": ("上置信界树搜索", "Q/N + C sqrt(ln T / N): value plus exploration bonus"),
    "cold start": ("冷启动", "new items or models with too little data to trust their statistics"),
    "cold-start SFT": ("冷启动监督微调", "a short SFT on a few good demonstrations before RL, so RL starts from a model "
                       "that already writes the answer format (DeepSeek-R1's first stage; the course's stage sft_cold)"),
    "advantage function": ("优势函数", "A = Q - V: how much better an action is than the average"),
    "value function": ("价值函数", "V(s): expected return from a state"),
    "baseline": ("基线", "a value subtracted from returns; it must not depend on the action (then it adds no bias), "
                 "and it can reduce variance"),
    "variance / bias": ("方差/偏差", "spread of an estimator / its systematic error"),
    "GAE (generalised advantage estimation)": ("广义优势估计", "advantage from TD errors, weighted by gamma*lambda"),
    "TD error": ("时序差分误差", "r + gamma V(s') - V(s)"),
    "KL estimators (k1, k2, k3)": ("KL估计器", "per-sample estimates of KL(π‖π_ref) from log r = log π_ref − log π: "
                                   "k1 = −log r (unbiased, can be negative), k2 = ½(log r)² (biased), "
                                   "k3 = r − 1 − log r (unbiased, never negative; k2 and k3 vary little while π ≈ π_ref)"),
    "advantage whitening": ("优势归一化（白化）", "rescaling a batch's advantages to mean 0 and standard deviation 1"),
    "explained variance": ("解释方差", "1 − Var(R − V)/Var(R): how much of the returns the critic predicts "
                           "(1 perfect, 0 no better than a constant)"),
    "PPO": ("近端策略优化", "proximal policy optimisation: clipped ratio, critic, KL to reference"),
    "DPO": ("直接偏好优化", "direct preference optimisation: an offline loss on preference pairs, derived in closed "
            "form from the KL-regularised RL objective; no reward model, no sampling, no RL loop"),
    "implicit reward": ("隐式奖励", "DPO's reward, never trained separately: r(x, y) = β · log(π(y|x) / π_ref(y|x)); "
                        "the policy itself is the reward model"),
    "partition function": ("配分函数（归一化常数）", "Z(x) = Σ_y π_ref(y|x) · exp(r(x, y)/β), the normaliser of the optimal "
                           "policy; intractable, and it cancels in DPO's difference of two rewards"),
    "Bradley-Terry model": ("Bradley-Terry 偏好模型", "P(y_w preferred to y_l) = σ(r(y_w) − r(y_l)): only reward "
                            "differences matter; the reward model's (03) and DPO's loss"),
    "preference accuracy": ("偏好准确率", "the share of held-out pairs whose reward ranks the chosen answer first "
                            "(0.5 for a coin, and for DPO's implicit reward at the start)"),
    "IPO / SimPO / ORPO": ("DPO 的变体", "IPO: a squared loss with a finite target margin; SimPO: no reference "
                           "model, length-normalised log-probs and a margin; ORPO: SFT loss plus an odds-ratio term, "
                           "no reference"),
    "online / iterative DPO": ("在线/迭代 DPO", "DPO on pairs sampled from the current policy and labelled by a judge "
                               "(here the verifier), repeated round by round"),
    "GRPO": ("组相对策略优化", "group relative policy optimisation: on-policy policy gradient without a critic; the "
             "advantage of an answer is its reward normalised within a group of answers to the same prompt, "
             "the same for every token of the answer"),
    "group relative advantage": ("组相对优势", "(r − mean of the group) / (std of the group + ε): the baseline of an "
                                 "answer is the mean reward of the group of answers to the same prompt (its own "
                                 "included)"),
    "zero-std group": ("零方差组（组内奖励全相同）", "a group whose answers all got the same reward: every advantage "
                       "is 0 and it contributes no gradient (TRL logs the share as frac_reward_zero_std)"),
    "length bias / difficulty bias": ("长度偏差/难度偏差", "Dr. GRPO's two critiques of GRPO: per-answer averaging "
                                      "favours long wrong answers; dividing by the group std over-weights prompts "
                                      "that are nearly always right or wrong"),
    "Dr. GRPO / DAPO / GSPO": ("GRPO 的改进算法", "Dr. GRPO: constant normaliser, no std; DAPO: clip-higher, dynamic "
                               "sampling, overlong penalty, token-level averaging; GSPO: one importance ratio per "
                               "sequence"),
    "clip-higher / dynamic sampling / overlong penalty": ("高裁剪上限/动态采样/超长惩罚", "DAPO's changes: "
                                                          "ε_high > ε_low; drop all-equal groups and refill the batch; "
                                                          "a soft penalty near the length limit"),
    "CISPO / SAPO": ("CISPO / SAPO（其他策略损失）", "CISPO clips the importance weight and stops its gradient instead "
                     "of clipping the objective; SAPO replaces the hard clip by a smooth sigmoid gate"),
    "monitor-only reward": ("仅监控的奖励", "a reward function with weight 0: computed and logged, never optimised — "
                            "a trusted metric to watch while optimising a proxy"),
    "policy gradient": ("策略梯度", "raise the log-probability of each action in proportion to its advantage: "
                        "∇E[R] = E[A · ∇log π(a|s)]"),
    "KL penalty": ("KL惩罚（KL散度惩罚项）", "β · KL(π ‖ π_ref), subtracted from the reward (PPO) or added to the loss "
                   "(GRPO), so the policy stays near the reference model: it forgets less and games the reward less"),
    "outcome reward / process reward": ("结果奖励/过程奖励", "one reward for the whole answer / one for each reasoning "
                                        "step; only a process reward says which step went wrong"),
    "verifiable reward": ("可验证奖励", "a reward computed by rules in a program (is the answer right, is the format "
                          "right?); RL on such rewards is called RLVR"),
    "R1 (DeepSeek-R1)": ("R1（DeepSeek-R1 推理模型）", "a reasoning model trained by cold-start SFT, GRPO with rule-based "
                         "rewards, rejection-sampling SFT and a final RL stage; writes its reasoning before the answer"),
    "R1-Zero": ("R1-Zero（无SFT、纯强化学习）", "DeepSeek-R1-Zero: GRPO with rule-based rewards applied directly to the "
                "base model, no SFT first; reasoning emerges, but the text is hard to read and mixes languages"),
    "aha moment": ("顿悟时刻（\u201c啊哈\u201d时刻）", "R1-Zero's chains of thought began, during RL, to stop, re-check and "
                   "correct themselves; reported as emerging from outcome rewards alone, at large scale"),
    "long chain of thought (long CoT)": ("长思维链", "a chain of thought of thousands of tokens that explores, checks and "
                                         "backtracks; R1-Zero's purpose was to synthesise such data"),
    "language consistency reward": ("语言一致性奖励", "R1's reward: the share of the chain of thought written in the "
                                    "prompt's language; bought readability at a small cost in accuracy"),
    "non-reasoning data": ("非推理数据", "writing, factual QA, translation… mixed into R1's second SFT (about 200k next "
                           "to 600k reasoning samples) so that general skills are kept"),
    "general-alignment RL": ("通用对齐强化学习", "R1's last stage: rule rewards on reasoning prompts plus reward models "
                             "for helpfulness and harmlessness on general ones"),
    "chain of thought (CoT)": ("思维链", "the reasoning written before the answer; in the course, inside the think tags"),
    "pass@k": ("pass@k（k次采样通过率）", "the chance that at least one of k sampled answers is correct; from n samples "
               "with c correct: 1 - C(n-c, k) / C(n, k)"),
    "reward hacking": ("奖励作弊（奖励黑客）", "the policy exploits flaws of the reward instead of improving"),
    "closed-form problem": ("闭式解问题", "a problem solvable by an explicit formula, without iterative search (as "
                            "DPO's closed-form optimal policy); not the same as verifiable (see verifiable reward)"),
    "in-context learning (ICL)": ("上下文学习", "learning from examples in the prompt, without weight updates"),
    "rejection sampling": ("拒绝采样", "sample many answers, keep only the good ones for further training (06 keeps "
                           "a bad one too, as the rejected side of a preference pair)"),
    "distillation": ("蒸馏", "a small student imitates a large teacher"),
    "teacher / student model": ("教师模型/学生模型", "the model imitated / the model that imitates"),
    "soft label / hard label": ("软标签/硬标签", "teacher's distribution / the ground-truth one-hot label"),
    "temperature": ("温度", "divides logits before softmax: >1 flattens, <1 sharpens"),
    "dark knowledge": ("暗知识", "what a teacher's probabilities on wrong answers say about which answers are nearly "
                       "right; a hard label carries none of it"),
    "sequence-level distillation": ("序列级蒸馏（用教师生成的数据做SFT）", "SFT of the student on answers the teacher "
                                    "wrote; works across tokenizers and through an API (R1-Distill)"),
    "logit distillation": ("logits蒸馏（对齐概率分布）", "the student matches the teacher's next-token distribution at "
                           "each position (a KL or JSD); needs a shared vocabulary (cross-tokenizer variants such as ULD "
                           "aside)"),
    "forward / reverse KL": ("前向KL/反向KL", "KL(teacher ‖ student) covers every mode of the teacher; KL(student ‖ "
                             "teacher) lets the student pick one mode and fit it"),
    "generalised JSD": ("广义JS散度", "β·KL(p‖m) + (1−β)·KL(q‖m) with m = βp + (1−β)q; GKD's and TRL's distillation "
                        "loss, β = 0 / 1 taken as forward / reverse KL"),
    "on-policy distillation (GKD)": ("在线策略蒸馏（GKD）", "the student samples its own answers and the teacher scores "
                                     "every token of them; aims to correct the student's own mistakes"),
    "exposure bias": ("曝光偏差", "a model trained only on reference prefixes meets its own, unseen prefixes at test "
                      "time, and one early error compounds"),
    "intermediate-layer distillation": ("中间层蒸馏", "the student's (projected) hidden states are trained to match "
                                        "the teacher's at chosen layers (FitNets, TinyBERT)"),
    "inference-time scaling": ("推理时扩展", "more computation per question at inference (more samples, search, a "
                               "judge that thinks longer) with no parameter changed"),
    "self-consistency (majority vote)": ("自洽性（多数投票）", "sample several answers and return the commonest final "
                                         "answer; helps only where mistakes disagree"),
    "best-of-N": ("N选一（最优采样）", "sample N answers and return the one a scorer (reward model, verifier) ranks "
                  "highest"),
    "generative reward model (GRM)": ("生成式奖励模型", "a reward model that writes its judgement (principles, "
                                      "critique, score) as text; DeepSeek-GRM"),
    "principle / critique": ("准则/批判", "the criteria a generative judge sets for a question / its text judging an "
                             "answer against them"),
    "SPCT": ("自我原则批判调优", "Self-Principled Critique Tuning: rejective fine-tuning then rule-based online RL that "
             "teach a GRM to write principles and critiques"),
    "meta reward model": ("元奖励模型", "a classifier that scores a generative RM's judgements, so that only trusted "
                          "ones vote"),
    "beam search": ("束搜索", "keep the few best partial outputs at each step and extend only those (by likelihood, or "
                    "by a PRM's step scores)"),
    "LoRA / PEFT": ("低秩适配/参数高效微调", "train small low-rank adapters instead of all weights"),
    "gradient / detach": ("梯度/梯度截断（停止梯度）", "x - x.detach() has value 0 and gradient 1"),
    "held-out set": ("留出集（测试集）", "examples kept out of all training and used only to measure"),
    "random seed": ("随机种子", "fixes a run's random numbers so that it can be repeated"),
    "profile (cpu-tiny / gpu)": ("运行配置", "the course's setting for where it runs: its own tiny model on a CPU, or a "
                                 "hub model on a GPU; checkpoints are kept per profile and base model"),
    "checkpoint": ("检查点（模型存档）", "saved weights and tokenizer of a stage, loaded by later notebooks"),
    "bfloat16 (bf16)": ("BF16（16位脑浮点数）", "16-bit floats with float32's range: half the memory, for GPU training"),
    "gradient checkpointing": ("梯度检查点", "recompute activations in the backward pass instead of storing them: "
                               "less memory, more compute"),
    "Triton kernel": ("Triton 算子（GPU内核）", "GPU code written in the Triton language; the CPU build of PyTorch has "
                      "no Triton"),
    "TRL vs verl": ("TRL 与 verl（后训练框架）", "TRL: Hugging Face's post-training library on top of transformers (SFT, "
                    "reward, DPO, GRPO trainers), used here; verl: ByteDance's RL framework for large-scale PPO/GRPO, "
                    "placing actor, critic, reference and rollout workers on many GPUs with Ray"),
    "Ray": ("Ray（分布式计算框架）", "a Python framework that runs tasks and stateful actors across many machines; "
            "verl and OpenRLHF use it to put the models of RLHF on different GPUs"),
    "OpenRLHF": ("OpenRLHF（开源RLHF框架）", "an RLHF framework built on Ray, vLLM and DeepSpeed: actor, critic, reward "
                 "and reference models on separate GPUs, vLLM for generation; trains 70B-class models"),
    "vLLM": ("vLLM（高吞吐推理引擎）", "a fast inference engine (PagedAttention for the KV cache, continuous batching); "
             "RL frameworks use it to generate the samples"),
    "unsloth": ("unsloth（高效微调库）", "faster, lower-memory fine-tuning kernels; it patches transformers and TRL, so "
                "it must be imported before them"),
    "QLoRA": ("QLoRA（量化低秩适配）", "LoRA on a base model whose frozen weights are stored in 4 bits (NF4): about a "
              "quarter of the memory of the quantised layers (embeddings usually stay 16-bit), a little slower and "
              "lossier; unsloth's load_in_4bit=True"),
    "format priming": ("格式预热（格式冷启动）", "a short SFT on a few worked answers in the target format before RL, so "
                       "that the first groups of GRPO already contain well-formed answers (unsloth's Qwen3 GRPO notebook; "
                       "R1's cold start in small)"),
    "min_p sampling": ("min_p 采样", "keep only tokens whose probability is at least min_p times the top token's, "
                       "then sample: cuts the junk tail and adapts to how sure the model is (the seed uses 0.1)"),
    "API drift": ("API 漂移（接口变更）", "arguments renamed or removed between library releases (warmup_ratio, "
                  "max_prompt_length, vllm_sampling_params); the commonest way a training notebook breaks"),
    "colocate / server mode": ("同卡共置 / 服务模式", "two ways TRL runs vLLM for GRPO: colocated in the training "
                               "processes on the same GPUs, or as a separate `trl vllm-serve` server on its own GPUs "
                               "that receives the new weights after each step"),
}


def glossary_table(terms: list[str] | None = None) -> str:
    """The glossary (or the listed ``terms``) as a Markdown table."""
    keys = list(GLOSSARY) if terms is None else terms
    unknown = [k for k in keys if k not in GLOSSARY]
    if unknown:
        raise KeyError(f"not in the glossary: {unknown}")
    rows = ["| English | 中文 | meaning |", "|---|---|---|"]
    rows += [f"| {_cell(k)} | {_cell(GLOSSARY[k][0])} | {_cell(GLOSSARY[k][1])} |" for k in keys]
    return "\n".join(rows)
