"""Training recipes: one object per stage, the single home of its knobs.

A recipe is a frozen dataclass whose fields each carry a one-line docstring. The
notebook that owns a stage makes it in its parameters cell (``recipe_for``), shows
it (``show``) and may override fields; the stage builder of ``stages`` uses the
very same object, so a rebuilt checkpoint is trained exactly as the notebook trains it::

    recipe = recipe_for("sft", profile, steps=200)   # defaults for this profile, one field changed
    show(recipe)                                     # a table: field, value, meaning

CPU values are the class defaults (sized for 2 CPU cores). A recipe class's ``SMOKE`` mapping caps its steps and
sizes on the ``smoke`` scale (env ``COURSE_SCALE=smoke``: the test matrix runs every notebook on other models in
minutes to show the code runs; a notebook's own overrides are capped too). A recipe class's ``GPU``
mapping holds the fields that differ on the ``gpu`` profile (a 0.6B hub model wants a
far smaller learning rate and longer sequences than the course's 0.46M-parameter one).
With a model of your own on a CPU (``COURSE_MODEL``), the learning rates follow the model and
the rest the machine: the ``GPU`` mapping's ``*learning_rate`` fields (chosen for a pretrained
model of real size) apply, the CPU's steps, batches and lengths stay; a model as small as the
course's own (up to ``adapt.SMALL_MODEL_PARAMETERS``) keeps the CPU's learning rates too.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import ClassVar

from .show import markdown_table, show_markdown
from .run_config import Profile


@dataclass(frozen=True)
class PretrainRecipe:
    """Next-token pretraining of the tiny Qwen3 on the packed corpus (notebook 01)."""

    steps: int = 900
    """optimizer steps of the Trainer run"""
    batch_size: int = 32
    """packed blocks per step"""
    learning_rate: float = 3e-3
    """peak learning rate, reached after a warm-up of 5% of the steps"""
    schedule: str = "cosine"
    """after the warm-up: cosine decay to 0 ("cosine") or a constant learning rate ("constant")"""
    weight_decay: float = 0.1
    """AdamW weight decay"""
    block_size: int = 64
    """tokens per packed block"""
    eval_every: int = 100
    """steps between validation-loss measurements"""

    GPU: ClassVar[dict] = {}
    SMOKE: ClassVar[dict] = {"steps": 4, "eval_every": 2}


@dataclass(frozen=True)
class SFTRecipe:
    """Supervised fine-tuning on arithmetic chats, loss on the assistant's tokens (notebook 02)."""

    steps: int = 400
    """optimizer steps"""
    batch_size: int = 32
    """chats per step"""
    learning_rate: float = 1e-3
    """peak learning rate, reached after a warm-up of 5% of the steps"""
    schedule: str = "cosine"
    """after the warm-up: cosine decay to 0 ("cosine") or a constant learning rate ("constant")"""
    max_length: int = 256
    """longest chat in tokens; longer ones are truncated"""
    n_examples: int | None = None
    """train on the first n demonstrations of the train split (None: all 7,500)"""
    stop_at_accuracy: float | None = None
    """stop once greedy accuracy on 200 validation problems reaches this (None: run all steps)"""
    check_every: int = 5
    """steps between those accuracy checks"""

    GPU: ClassVar[dict] = {"learning_rate": 2e-5, "max_length": 1024, "batch_size": 16}
    SMOKE: ClassVar[dict] = {"steps": 4, "check_every": 2}


@dataclass(frozen=True)
class RewardRecipe:
    """Bradley-Terry reward model on preference pairs (notebook 03)."""

    steps: int = 250
    """optimizer steps"""
    batch_size: int = 32
    """preference pairs per step"""
    learning_rate: float = 1e-3
    """peak learning rate, reached after a warm-up of 5% of the steps"""
    schedule: str = "cosine"
    """after the warm-up: cosine decay to 0 ("cosine") or a constant learning rate ("constant")"""
    max_length: int = 256
    """longest chat in tokens"""

    GPU: ClassVar[dict] = {"learning_rate": 1e-5, "max_length": 1024, "batch_size": 16}
    SMOKE: ClassVar[dict] = {"steps": 4}


@dataclass(frozen=True)
class PPORecipe:
    """The course's own PPO on a language model: rollouts, KL-shaped rewards, GAE, clipped updates (notebook 05)."""

    steps: int = 60
    """PPO iterations; each samples a fresh batch of rollouts and updates on it"""
    rollouts_per_step: int = 64
    """completions sampled per iteration"""
    samples_per_prompt: int = 1
    """completions per prompt (TRL's PPO: 1); rollouts_per_step / samples_per_prompt prompts per iteration"""
    temperature: float = 0.7
    """rollout sampling temperature (the losses use softmax(z / T) too; chosen over 1.0 by measurement)"""
    max_new_tokens: int = 48
    """longest completion in tokens"""
    learning_rate: float = 4e-5
    """AdamW learning rate of the policy (one optimizer for policy and critic, as TRL); larger rates risk collapsing accuracy"""
    value_learning_rate: float | None = 1e-3
    """learning rate of the critic, a second parameter group of that optimizer (None: ``learning_rate``, as TRL; see 05)"""
    ppo_epochs: int = 2
    """passes over each batch of rollouts (more epochs at a lower rate: slower, not clearly better)"""
    minibatch_size: int = 32
    """rollouts per gradient step inside an epoch"""
    clip_range: float = 0.2
    """epsilon of the clipped policy ratio, 1 ± epsilon"""
    clip_range_value: float = 0.2
    """how far a value prediction may move from its rollout-time value before it is clipped"""
    vf_coef: float = 0.1
    """weight of the value loss in the total loss"""
    entropy_coef: float = 0.0
    """weight of an entropy bonus (0: none, as TRL's PPO)"""
    kl_coef: float = 0.01
    """beta: the per-token reward penalty is -beta * KL(policy || reference) (TRL's default: 0.05)"""
    kl_estimator: str = "k1"
    """per-token KL estimator in the reward: "k1", "k2" or "k3" (losses.kl_estimate)"""
    gamma: float = 1.0
    """discount per token"""
    lam: float = 1.0
    """GAE lambda: 0 is one-step TD, 1 is the Monte-Carlo return (TRL's default: 0.95; see notebook 05, section 4)"""
    whiten_advantages: bool = True
    """normalise advantages to mean 0, std 1 over each batch's tokens"""
    missing_eos_penalty: float = 1.0
    """subtracted from the score of a completion cut off before its EOS"""
    max_grad_norm: float = 1.0
    """gradient-norm clip of each update"""

    GPU: ClassVar[dict] = {"learning_rate": 1e-6, "value_learning_rate": 1e-5, "max_new_tokens": 256,
                           "rollouts_per_step": 32, "minibatch_size": 8}
    SMOKE: ClassVar[dict] = {"steps": 2, "rollouts_per_step": 8, "minibatch_size": 4}


@dataclass(frozen=True)
class DPORecipe:
    """Direct preference optimisation with TRL's DPOTrainer, on self-generated pairs by default (notebook 06)."""

    steps: int = 450
    """optimizer steps (fewer leave run (b)'s gain small at some seeds; 450 x 16 pairs fit the offline set)"""
    batch_size: int = 16
    """preference pairs per step"""
    learning_rate: float = 2e-5
    """learning rate after a warm-up of 5% of the steps (the notebook's lr run shows 10x too much)"""
    schedule: str = "constant"
    """after the warm-up: cosine decay to 0 ("cosine") or a constant learning rate ("constant")"""
    beta: float = 1.5
    """KL strength: the implicit reward is beta * log(pi / pi_ref); TRL's default 0.1 drifts far from the reference
    and ends well below this recipe's accuracy here (against the start it varies with the seed); 1.5 was chosen by
    measurement (smaller values left some seeds' gain small)"""
    loss_type: str = "sigmoid"
    """TRL DPOTrainer loss: "sigmoid" (DPO) or "ipo" (here beta is IPO's tau: the target margin is 1 / (2 beta))"""
    simpo_gamma: float = 0.5
    """SimPO only: the target reward margin gamma"""
    max_length: int = 256
    """longest chat in tokens"""
    pair_prompts: int = 3000
    """training problems sampled for self-generated pairs (those whose answers are all right or all wrong give none)"""
    samples_per_prompt: int = 4
    """answers sampled per problem; a problem with a right and a wrong one gives a pair"""
    pair_temperature: float = 0.7
    """sampling temperature of those answers (below 1: mistakes closer to the greedy answer's)"""
    max_new_tokens: int = 48
    """longest sampled answer in tokens"""

    GPU: ClassVar[dict] = {"learning_rate": 5e-7, "beta": 0.1, "batch_size": 8, "max_length": 1024,
                           "max_new_tokens": 256}
    SMOKE: ClassVar[dict] = {"steps": 3, "batch_size": 4, "pair_prompts": 48, "samples_per_prompt": 2}


@dataclass(frozen=True)
class GRPORecipe:
    """Group relative policy optimisation with TRL's GRPOTrainer and a LoRA adapter (notebook 07)."""

    steps: int = 150
    """optimizer steps (one generation batch each); chosen by measurement: fewer left the weakest starts' gain small"""
    prompts_per_step: int = 8
    """prompts per step; the batch is prompts_per_step x num_generations completions (chosen over 4 by measurement)"""
    num_generations: int = 8
    """completions sampled per prompt: the group whose mean is the baseline"""
    learning_rate: float = 7e-4
    """learning rate of the LoRA weights (linear decay); 1e-3 at 4 prompts a step can collapse accuracy"""
    beta: float = 0.04
    """weight of the k3 KL to the reference (the base model with the adapter off); without it (0) accuracy can collapse"""
    loss_type: str = "dapo"
    """how per-token losses are averaged: "grpo", "bnpo", "dr_grpo" or "dapo" (TRL 1.15's default)"""
    scale_rewards: str = "group"
    """advantage scaling: divide by the group's std ("group"), the batch's ("batch") or not at all ("none")"""
    epsilon: float = 0.2
    """lower clip of the ratio, 1 - epsilon"""
    epsilon_high: float = 0.2
    """upper clip of the ratio, 1 + epsilon_high (DAPO's clip-higher raises it, e.g. 0.28)"""
    importance_sampling_level: str = "token"
    """one ratio per token ("token", GRPO) or per completion ("sequence", GSPO)"""
    num_iterations: int = 1
    """updates per generation batch (> 1 reuses buffered old log-probs, importance-sampled)"""
    temperature: float = 0.8
    """sampling temperature of the completions (chosen over 1.0 by measurement)"""
    max_completion_length: int = 48
    """longest completion in tokens; longer ones are cut (and count as truncated)"""
    lora_r: int = 16
    """LoRA rank (0: full fine-tuning, which needs a separate reference model when beta > 0)"""
    lora_alpha: int = 32
    """LoRA scale numerator: the update is (alpha / r) B A"""
    train_problems: int = 3000
    """training problems the prompts are drawn from (answers stay hidden from the policy)"""

    GPU: ClassVar[dict] = {"learning_rate": 5e-6, "max_completion_length": 512, "prompts_per_step": 8,
                           "steps": 300}
    SMOKE: ClassVar[dict] = {"steps": 2, "prompts_per_step": 2, "num_generations": 4, "train_problems": 64}


@dataclass(frozen=True)
class R1Recipe:
    """The DeepSeek-R1 pipeline in miniature (notebook 08). Each RL stage is a GRPORecipe run, each SFT an SFTRecipe one."""

    zero_steps: int = 60
    """R1-Zero: GRPO steps straight from the pretrained base (the format emerges well within that)"""
    cold_start_problems: int = 1000
    """fresh train problems R1-Zero answers once each; its verified, readable answers are the cold-start set"""
    cold_start_rows: int = 300
    """size of the cold-start set; topped up with the data set's demonstrations if R1-Zero verified fewer"""
    reasoning_steps: int = 80
    """reasoning RL: GRPO steps from the cold-start model (format + accuracy + step-language rewards)"""
    rejection_problems: int = 1600
    """fresh train problems the reasoning-RL model answers for the second SFT"""
    rejection_samples: int = 2
    """answers sampled per problem; at most one verified answer is kept (the reward model breaks ties)"""
    sample_temperature: float = 0.8
    """temperature of the cold-start and rejection samples"""
    nonreasoning_ratio: float = 1 / 3
    """non-reasoning rows per reasoning row in the second SFT (R1: ~200k to ~600k)"""
    sft2_steps: int = 400
    """second SFT: steps from the pretrained base with 02's full SFT recipe (chosen by measurement: fewer left a weak
    seed's model far below 02's)"""
    rl2_steps: int = 80
    """RL round 2: GRPO steps from the second SFT, with rule rewards plus 03's reward model (chosen by measurement: fewer
    barely moved accuracy)"""
    rl2_rm_weight: float = 0.2
    """weight of the reward model's score next to the rule rewards (weight 1 each)"""

    GPU: ClassVar[dict] = {"zero_steps": 300, "cold_start_problems": 2000, "cold_start_rows": 1000,
                           "reasoning_steps": 300, "rejection_problems": 2500, "rl2_steps": 100}
    SMOKE: ClassVar[dict] = {"zero_steps": 2, "cold_start_problems": 16, "cold_start_rows": 16, "reasoning_steps": 2,
                             "rejection_problems": 16, "sft2_steps": 3, "rl2_steps": 2}


# The cold start (DeepSeek-R1's term): SFT on few demonstrations, so that RL has headroom.
# A fixed number of demonstrations gives very different models on different seeds (a seed
# whose pretrained model reads the question's numbers less reliably learns far less from the
# same demonstrations and steps). So the cold start
# streams the train chats at a constant learning rate and stops as soon as validation
# accuracy reaches the target: every seed starts RL with the same headroom, after however
# many demonstrations its model needed (notebook 02 plots accuracy against them).
COLD_START_TARGET = 0.4
COLD_START_MAX_STEPS = 468  # at most two passes over the 7,500 train chats at batch 32

@dataclass(frozen=True)
class DistillRecipe:
    """Distilling the SFT teacher into a student a sixth its size, on prompts alone (notebook 09)."""

    prompts: int = 2000
    """train-split questions the teacher answers (greedy); their reference answers are never trained on"""
    seq_steps: int = 800
    """steps of one learning-rate schedule of the SFT run from scratch on the teacher's answers (at most seq_cycles
    schedules): sequence-level distillation, and the shared start below (a fixed number of steps gives starts far
    apart in held-out accuracy across seeds and machines: too little headroom at some, too little skill at others)"""
    seq_target: float | None = 0.5
    """stop that run at the first check whose validation accuracy reaches this, as 02's cold start does: the starts
    still spread (the curve is steep there) but far less than after a fixed number of steps (None: run all
    seq_steps)"""
    seq_check_every: int = 25
    """steps between those checks (200 validation problems each)"""
    seq_cycles: int = 2
    """learning-rate schedules of seq_steps each that run may use: one that has not reached seq_target after the first
    goes on from where it stopped with a fresh schedule (a warm restart); the check cell fails if the last ends below
    it. The climb to the target is sudden and its step varies from seed to seed; a second schedule lets a late climb
    finish without lengthening the schedule of runs that climb early"""
    learning_rate: float = 3e-3
    """peak learning rate of that from-scratch run (cosine over seq_steps)"""
    compare_steps: int = 100
    """steps of each off-policy method from the shared start (SFT on the teacher's text, logit KD, hidden-state KD)"""
    compare_learning_rate: float = 1e-3
    """peak learning rate of every run that starts from the shared start (cosine)"""
    onpolicy_steps: int = 50
    """on-policy GKD steps from the shared start (each samples from the student first: dearer than an off-policy step)"""
    onpolicy_temperature: float = 0.5
    """student sampling temperature in on-policy GKD (chosen over 1.0 by measurement; exercise 🐕 2 compares the two)"""
    beta: float = 0.0
    """GKD's divergence: 0 forward KL(teacher || student), 1 reverse KL, in between the generalised JSD"""
    hidden_weight: float = 1.0
    """weight of the hidden-state loss in intermediate-layer distillation"""
    final_steps: int = 400
    """more SFT steps on the teacher's answers from the shared start: the notebook's final student"""
    batch_size: int = 32
    """chats per optimizer step in every run"""
    max_new_tokens: int = 48
    """answer length limit for the teacher's answers and on-policy samples"""
    timed_sft_steps: int = 1200
    """section 6, equal time: SFT steps on the teacher's answers from the shared start (chosen to take about as long on
    a CPU as each run below, so the methods compare at roughly equal time; the table prints each run's seconds), at
    compare_learning_rate, constant after 5 warm-up steps"""
    opd_steps: int = 200
    """section 6: on-policy distillation steps (TRL DistillationTrainer, reverse KL): each samples batch_size answers"""
    opd_learning_rate: float = 3e-4
    """section 6: its learning rate, constant after 5 warm-up steps (chosen after a trial at 1e-3 rose, then fell back
    below the start)"""
    opd_temperature: float = 1.0
    """section 6: the student's sampling temperature, which DistillationTrainer also applies to the loss"""
    timed_grpo_steps: int = 200
    """section 6: GRPO steps on the student (07's recipe: LoRA, 8 prompts x 8, the verifier), constant learning rate"""

    GPU: ClassVar[dict] = {"learning_rate": 2e-4, "compare_learning_rate": 5e-5, "max_new_tokens": 256,
                           "batch_size": 16, "opd_learning_rate": 5e-6}
    SMOKE: ClassVar[dict] = {"prompts": 64, "seq_steps": 4, "seq_check_every": 2, "compare_steps": 3, "onpolicy_steps": 2,
                             "final_steps": 3, "batch_size": 8, "timed_sft_steps": 4, "opd_steps": 2,
                             "timed_grpo_steps": 2}


@dataclass(frozen=True)
class AgenticRecipe:
    """A model that learns to call a calculator: cold-start SFT on tool demonstrations, then GRPO with TRL's
    multi-turn tool loop (notebook 12)."""

    demonstrations: int = 2000
    """cold-start demonstrations, from the train split (GRPO's prompts are the rest)"""
    direct_share: float = 0.5
    """share of them that answer directly, without the tool (the habit of a model that never had one); the rest call
    it (question -> call -> result -> answer)"""
    sft_max_steps: int = 1500
    """cap on the cold start's SFT steps (batch 32). It stops earlier, at the first check where its calls copy the
    question's numbers right often enough (``skill_target``): that skill is learned late and often suddenly, at a step
    that varies with the seed, so any fixed count of steps is too few at some seeds. Past the cap the notebook stops and
    names the cause: GRPO would get a policy with nothing to reinforce"""
    sft_schedule: str = "constant"
    """the cold start's learning-rate schedule: constant after the warm-up, so the learning rate the skill arrives at
    does not depend on when it arrives (a cosine over fewer steps would have decayed before it at a slow seed)"""
    sft_learning_rate: float = 1e-3
    """peak learning rate of the cold start"""
    skill_target: float = 0.8
    """the cold start stops once it is right on this share of the validation problems it calls the tool on: enough
    right calls for GRPO's groups to differ, so that it has calls to reinforce"""
    check_every: int = 100
    """cold-start steps between two measurements of the skill"""
    check_problems: int = 100
    """validation problems the skill is measured on (greedy, with the tool)"""
    steps: int = 40
    """GRPO steps (one generation batch each): enough for the rollouts to call the tool on nearly every prompt well
    before the last step"""
    prompts_per_step: int = 8
    """prompts per GRPO step; the batch is prompts_per_step x num_generations rollouts"""
    num_generations: int = 8
    """rollouts per prompt: the group whose mean reward is the baseline"""
    learning_rate: float = 7e-4
    """GRPO learning rate of the LoRA weights (07's); full fine-tuning (at 3e-4) can lose the call's format early in
    the run"""
    temperature: float = 1.0
    """sampling temperature of the rollouts"""
    lora_r: int = 16
    """LoRA rank in GRPO (0: all weights train)"""
    max_completion_length: int = 64
    """tokens of a whole rollout, the model's and the tool's: a call with five addends, its result and the answer
    take about 55"""
    max_calls: int = 1
    """rounds of tool calls per rollout (TRL's max_tool_calling_iterations)"""
    side_steps: int = 30
    """GRPO steps of each 'what goes wrong' run (the tool mask off; a reward for calling; a start without the
    skill)"""

    GPU: ClassVar[dict] = {"sft_learning_rate": 2e-5, "learning_rate": 5e-6, "max_completion_length": 512}
    SMOKE: ClassVar[dict] = {"demonstrations": 16, "sft_max_steps": 4, "check_every": 2, "check_problems": 4,
                             "steps": 2, "prompts_per_step": 2, "num_generations": 4, "side_steps": 2}


@dataclass(frozen=True)
class ScalingRecipe:
    """Inference-time scaling: many answers per question, and three kinds of judge trained for it (notebook 10)."""

    samples: int = 16
    """answers sampled per held-out question; every curve reads the first N of them (N = 1, 2, 4, ... up to this)"""
    temperature: float = 0.8
    """sampling temperature of those answers (chosen over 0.5 by measurement: lower temperatures give samples that
    differ less, and a vote needs them to differ)"""
    paraphrases: int = 8
    """wordings of each held-out question answered greedily, for the vote over paraphrases"""
    prm_problems: int = 1500
    """train problems with one labelled answer each (right, misread, slipped or contradicting) for the PRM"""
    prm_steps: int = 120
    """optimizer steps of the PRM (a token classifier on the sft backbone)"""
    prm_learning_rate: float = 1e-3
    """peak learning rate of the PRM (cosine)"""
    beam_width: int = 2
    """partial answers the PRM beam search keeps per question after each step"""
    beam_expand: int = 2
    """next steps sampled from each kept partial answer (the first round samples width x expand first steps)"""
    max_step_tokens: int = 16
    """tokens generated per beam-search round (the longest step with its separators is 14 tokens; the rest is cut)"""
    grm_pairs: int = 1000
    """train preference pairs whose two answers the judge learns to critique (2 chats per pair)"""
    grm_steps: int = 150
    """SFT steps of the generative judge, from the sft stage"""
    grm_learning_rate: float = 1e-3
    """peak learning rate of the judge's SFT (cosine)"""
    grm_k: int = 8
    """critiques sampled per answer at inference; the curves read the first k"""
    grm_temperature: float = 1.0
    """sampling temperature of the critiques (a vote needs critiques that differ)"""
    grm_eval_pairs: int = 150
    """held-out preference pairs the judges are scored on"""
    meta_pairs: int = 1000
    """(right critique, wrong critique) pairs the meta reward model trains on, from train pairs the judge did not see"""
    meta_steps: int = 30
    """Bradley-Terry steps of the meta reward model (TRL RewardTrainer), from the sft backbone"""
    meta_keep: int = 4
    """critiques (of the k) the meta reward model lets vote"""
    batch_size: int = 32
    """examples per optimizer step in every training run"""
    max_new_tokens: int = 48
    """answer length limit of the policy's samples"""

    GPU: ClassVar[dict] = {"samples": 32, "max_new_tokens": 256, "prm_learning_rate": 2e-5,
                           "grm_learning_rate": 2e-5, "batch_size": 16}
    SMOKE: ClassVar[dict] = {"samples": 4, "paraphrases": 2, "prm_problems": 64, "prm_steps": 3, "grm_pairs": 32,
                             "grm_steps": 3, "grm_k": 2, "grm_eval_pairs": 16, "meta_pairs": 16, "meta_steps": 2,
                             "meta_keep": 2, "batch_size": 8}



@dataclass(frozen=True)
class CapstoneRecipe:
    """The seed's Qwen3 GRPO recipe with unsloth's format priming: a short SFT, then GRPO with LoRA (notebook 11)."""

    prime_problems: int = 64
    """worked train problems (in the seed's tags) the format-priming SFT sees (unsloth's notebook: ~60)"""
    prime_steps: int = 40
    """optimizer steps of the priming SFT (40 x 8 = 5 passes over the 64 demonstrations)"""
    prime_batch_size: int = 8
    """demonstrations per priming step"""
    prime_learning_rate: float = 1e-3
    """priming learning rate (CPU: the full tiny model, new tag embeddings included; GPU: the LoRA)"""
    lora_r: int = 16
    """LoRA rank of the GRPO adapter (the seed and unsloth's notebook: 32, on 7B and 4B models)"""
    steps: int = 200
    """GRPO optimizer steps (chosen by measurement: fewer left the weakest primed starts' gain within the check's
    noise)"""
    prompts_per_step: int = 8
    """prompts per step; a step scores prompts_per_step x num_generations completions (chosen over 4 by measurement:
    fewer prompts give the tiny model too noisy a gradient)"""
    num_generations: int = 8
    """completions per prompt: the group whose mean is the baseline"""
    learning_rate: float = 5e-4
    """GRPO learning rate of the LoRA weights (linear decay after a 10% warm-up); chosen over 2e-4 by measurement
    (notebook 11's exercise 🐕 1 compares rates)"""
    beta: float = 0.0
    """KL weight to the reference: the seed's and unsloth's 0, so no reference pass (07's GRPO and the GRPO script
    use 0.04, GRPORecipe: the capstone follows the seed's recipe, which is its lesson)"""
    temperature: float = 1.0
    """sampling temperature during GRPO (the seed's 1.0, with min_p below)"""
    min_p: float = 0.1
    """drop tokens whose probability is below min_p x the top token's (the seed's vLLM setting)"""
    max_completion_length: int = 64
    """completion budget in tokens (CPU: a right answer is ~30 tokens; GPU: max_seq_length - longest prompt)"""
    train_problems: int = 3000
    """train problems the GRPO prompts come from, before the length filter"""
    length_quantile: float = 0.9
    """keep prompts no longer than this quantile of prompt lengths (the seed's filter)"""
    weight_decay: float = 0.001
    """AdamW weight decay (unsloth's notebook; the seed: 0.01)"""
    optim: str = "adamw_torch"
    """optimizer (the seed's adamw_8bit needs bitsandbytes and a GPU)"""

    GPU: ClassVar[dict] = {"prime_learning_rate": 2e-4, "prime_batch_size": 4, "lora_r": 32, "steps": 60,
                           "prompts_per_step": 2, "num_generations": 4, "learning_rate": 2e-5,
                           "max_completion_length": 768, "optim": "adamw_8bit"}
    SMOKE: ClassVar[dict] = {"prime_problems": 16, "prime_steps": 2, "steps": 2, "prompts_per_step": 2,
                             "num_generations": 4, "train_problems": 64}


DEFAULTS = {
    "pretrain": PretrainRecipe(),
    "sft": SFTRecipe(),
    "sft_cold": SFTRecipe(steps=COLD_START_MAX_STEPS, stop_at_accuracy=COLD_START_TARGET, schedule="constant",
                          check_every=1),
    "reward": RewardRecipe(),
    "ppo": PPORecipe(),
    "dpo": DPORecipe(),
    "grpo": GRPORecipe(),
    "r1": R1Recipe(),
    "distill": DistillRecipe(),
    "scaling": ScalingRecipe(),
    "capstone": CapstoneRecipe(),
    "agentic": AgenticRecipe(),
}


def _small(model_id: str) -> bool:
    from .adapt import SMALL_MODEL_PARAMETERS, parameter_count
    return parameter_count(model_id) <= SMALL_MODEL_PARAMETERS


def recipe_for(stage: str, profile: Profile, **overrides):
    """The recipe of ``stage`` for ``profile`` (GPU values applied there; a model of your own on a CPU takes the GPU
    learning rates unless it is as small as the course's: ``adapt.SMALL_MODEL_PARAMETERS``), with ``overrides``."""
    if stage not in DEFAULTS:
        raise ValueError(f"no recipe for stage {stage!r}; stages with recipes: {sorted(DEFAULTS)}")
    recipe = DEFAULTS[stage]
    if not profile.is_cpu and recipe.GPU:
        recipe = replace(recipe, **recipe.GPU)
    elif profile.model_id is not None and recipe.GPU and not _small(profile.model_id):
        # your own model of real size on a CPU: the GPU recipes' learning rates, the CPU's sizes
        recipe = replace(recipe, **{k: v for k, v in recipe.GPU.items() if k.endswith("learning_rate")})
    unknown = set(overrides) - {f.name for f in fields(recipe)}
    if unknown:
        raise TypeError(f"{type(recipe).__name__} has no field(s) {sorted(unknown)}; "
                        f"fields: {[f.name for f in fields(recipe)]}")
    recipe = replace(recipe, **overrides) if overrides else recipe
    if profile.scale == "smoke":   # after the overrides: a notebook's longer run is cut as well
        recipe = replace(recipe, **{k: min(getattr(recipe, k), v) for k, v in recipe.SMOKE.items()
                                    if getattr(recipe, k) is not None})
    return recipe


@lru_cache(maxsize=None)
def field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a recipe class, read from its source, as one line.

    A docstring wrapped over several source lines is joined (a line break would end the row of
    :func:`describe`'s Markdown table).
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def describe(recipe) -> str:
    """A recipe as a Markdown table: field, value, meaning (changed fields are marked)."""
    cls = type(recipe)
    docs, default = field_docs(cls), cls()
    names, values, meanings = [], [], []
    for f in fields(recipe):
        value = getattr(recipe, f.name)
        mark = "" if value == getattr(default, f.name) else " ✎"
        names.append(f"`{f.name}`")
        values.append(f"`{value!r}`{mark}")
        meanings.append(docs.get(f.name, ""))
    table = markdown_table({"field": names, "value": values, "meaning": meanings})
    return (f"**{cls.__name__}** — {cls.__doc__.strip()}\n\n{table}\n\n"
            "✎ differs from the class default (profile or override).")


def show(recipe) -> None:
    """Display :func:`describe` as Markdown in a notebook (printed elsewhere)."""
    show_markdown(describe(recipe))
