"""course_utils: what a notebook of the LLM post-training course imports.

Two kinds of module. **The lesson**, one module per stage, in pipeline order (each loss is a pure function of tensors
in ``losses``, checked against TRL's):

================= ==========================================================
losses            losses as pure functions of tensors; ``completion_logps``
rewards           verifiable reward functions in TRL's protocol (never raise on model output)
probes            01-03's probes: the tagged format in a base model, SFT's blind spots, a reward model's
rl_basics         notebook 04's toy experiments: bandits, cliff walk, IS, MC, MCTS
ppo               the course's own PPO (TRL has none since 1.13): one function per phase
dpo               self-generated preference pairs, implicit-reward accuracy, TRL loss parity
grpo              GRPO rows, TRL's generation batch, advantage/log-prob/loss parity with TRL
stale_rollouts    notebook 07: rollouts sampled by old weights, TRL's importance-sampling correction
r1                R1-Zero's prompts, rejection sampling for the cold start and the second SFT
distill           sequence-level, logit (GKD) and hidden-state distillation (notebook 09)
inference_scaling notebook 10: votes, best-of-N, a PRM and a generative judge
capstone          notebook 11: the seed's tag template, format priming rows, rewards, GRPO/vLLM configs
agentic           notebook 12: tool tags and template, a safe calculator, the multi-turn rollout
rl_failures       notebook 13: RL runs made to fail, their estimators and fixes (high-entropy mask, sampler gaps)
memory            training memory of each notebook's GPU recipe for Qwen3-0.6B/1.7B/4B (notebook 00)
================= ==========================================================

**The notebook plumbing**, what a cell calls around the lesson, in the order data flows:

================= ==========================================================
paths             where data is read, notebooks found and artifacts written
run_config        the run's configuration: profiles (cpu-tiny / gpu), seeds, threads, CPU-safe trainer args
recipes           one recipe object per stage: the single home of its knobs
data              the tiny world: arithmetic problems, corpus, preference pairs, non-reasoning chats
modeling          tokenizer training, tiny Qwen3 config, safetensors checkpoints, models of other families
adapt             another model's tokenizer made ready for the course: pad token, tags, template, budget
chat              the course's chat prompt and its token encoding
training          trainer set-ups built from a recipe: pretraining, SFT, reward model, DPO, SimPO, GRPO
stages            the stage table, one generic builder, ``load_stage``
generation        eval mode, greedy generation, sampling with completion masks
engine            the course's KV-cached decoder: generate's tokens at a fraction of its cost
evaluation        greedy accuracy, pass@k, failure breakdown, pair accuracy, KL to a reference
experiment        around each experiment: ``evaluate``, the run log ``Runs``, when a check asserts (``calibrated``)
diagnostics       reading an RL run's log history: failure signs and their usual fixes
results           each notebook's results record (``artifacts/results/<notebook>.json``)
environment       what a run was measured in: package versions, CPU and instruction set, threads, commit
plotting          figures; every function returns ``(fig, ax)``
show              what a cell shows: ``compare`` with the library, ``show_source``, Markdown, ``markdown_table``
progress          the course's progress bars: widgets live, text bars in a headless run
course            the notebook map, the English-Chinese glossary, the hosted entry points (``COURSE_REPO``)
compat            CPU stand-ins for TRL's Triton-only log-prob and divergence kernels
================= ==========================================================

What only ``make`` and CI call (the runner, the test scheduler, seeds, the model matrix, the book, the bench, the
assignments and grader, the reports) lives in the sibling package :mod:`course_tools`; this package imports it only
for student mode's hook below.

Importing the package imports nothing heavy: TRL is imported only where a TRL
trainer is built (so unsloth can be imported first on the GPU path).
"""
__version__ = "0.1.0"

import os as _os

IMPL = _os.environ.get("COURSE_IMPL") or "reference"
if IMPL not in ("reference", "student"):
    raise ValueError(f"COURSE_IMPL must be 'reference' or 'student', got {IMPL!r}")
if IMPL == "student":   # a class's assignments: the student's functions wherever the course calls the reference
    from course_tools.assignments import install as _install
    STUDENT_FUNCTIONS = _install()
    print("course_utils in student mode: " + ", ".join(f"{k} ({v})" for k, v in STUDENT_FUNCTIONS.items()))
