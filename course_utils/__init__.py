"""course_utils: the reusable half of the LLM post-training course.

One module per concern, in pipeline order:

================= ==========================================================
paths             where data is read, notebooks found and artifacts written
environment       what a run was measured in: package versions, CPU and instruction set, threads, commit
profile           run profiles (cpu-tiny / gpu), seeds, threads, CPU-safe trainer args
recipes           one recipe object per stage: the single home of its knobs
data              the tiny world: arithmetic problems, corpus, preference pairs, non-reasoning chats
modeling          tokenizer training, tiny Qwen3 config, safetensors checkpoints
adapt             another model's tokenizer made ready for the course: pad token, tags, template, budget
training          trainer set-ups built from a recipe: pretraining, SFT, reward model, DPO, SimPO, GRPO
stages            the stage table, one generic builder, ``load_stage``
generation        eval mode, greedy generation, sampling with completion masks
engine            the course's KV-cached decoder: generate's tokens at a fraction of its cost
losses            losses as pure functions of tensors; ``completion_logps``
rewards           verifiable reward functions in TRL's protocol (never raise on model output)
rl_basics         notebook 04's toy experiments: bandits, cliff walk, IS, MC, MCTS
evaluation        greedy accuracy, pass@k, failure breakdown, pair accuracy, KL to a reference
experiment        around each experiment: the one rule for when a check cell asserts (``calibrated``)
ppo               the course's own PPO (TRL has none since 1.13): one function per phase
dpo               self-generated preference pairs, implicit-reward accuracy, TRL loss parity
grpo              GRPO rows, TRL's generation batch, advantage/log-prob/loss parity with TRL
stale_rollouts    notebook 07: rollouts sampled by old weights, TRL's importance-sampling correction
r1                R1-Zero's prompts, rejection sampling for the cold start and the second SFT
distill           sequence-level, logit (GKD) and hidden-state distillation (notebook 09)
inference_scaling notebook 10: votes, best-of-N, a PRM and a generative judge
capstone          notebook 11: the seed's tag template, format priming rows, rewards, GRPO/vLLM configs
agentic           notebook 12: tool tags and template, a safe calculator, the multi-turn rollout
diagnostics       reading an RL run's log history: failure signs and their usual fixes
plotting          figures; every function returns ``(fig, ax)``
checks            ``compare`` from-scratch code with the library; ``show_source``
results           per-notebook metrics -> ``build/RESULTS.md``; seconds against budgets
progress          the course's progress bars: widgets live, text bars in a headless run
runner            ``make course``: every notebook in a fresh kernel -> ``build/``
book              ``make book``: the executed notebooks as a static site (Sphinx + MyST-NB); install cells
browser           a headless Chromium over the DevTools protocol: the book as a reader's browser shows it
testrun           ``make test``: notebooks 01-03, then two pytest streams side by side at one thread each
seeds             ``make seeds``: the course once per seed -> ``build/SEEDS.md``
matrix            ``make matrix``: notebooks 02-12 on two other model families, at the smoke scale
base_model        a small base model of another family, pretrained here: "your own model" at full scale
assignments       ``make assignments``: the graded functions as stubs; student mode (``COURSE_IMPL=student``)
grader            ``make grade``: a student's functions against the reference, edge cases, gradients, training
bench             ``make bench``: each phase timed against this machine's matmul roofline
memory            training memory of each notebook's GPU recipe for Qwen3-0.6B/1.7B/4B: copies, activations, logits
course            the notebook map, the English-Chinese glossary, the hosted entry points (``COURSE_REPO``)
compat            CPU fallbacks for TRL 1.15's Triton-only log-prob and divergence kernels
================= ==========================================================

Importing the package imports nothing heavy: TRL is imported only where a TRL
trainer is built (so unsloth can be imported first on the GPU path).
"""
__version__ = "0.1.0"

import os as _os

IMPL = _os.environ.get("COURSE_IMPL") or "reference"
if IMPL not in ("reference", "student"):
    raise ValueError(f"COURSE_IMPL must be 'reference' or 'student', got {IMPL!r}")
if IMPL == "student":   # a class's assignments: the student's functions wherever the course calls the reference
    from .assignments import install as _install
    STUDENT_FUNCTIONS = _install()
    print("course_utils in student mode: " + ", ".join(f"{k} ({v})" for k, v in STUDENT_FUNCTIONS.items()))
