"""course_utils: the reusable half of the LLM post-training course.

One module per concern, in pipeline order:

========== ==========================================================
paths      where data is read and artifacts are written
profile    run profiles (cpu-tiny / gpu), seeds, CPU-safe trainer args
data       the tiny world: arithmetic problems, corpus, preference pairs
modeling   tokenizer training, tiny Qwen3 config, safetensors checkpoints
training   trainer recipes: pretraining (packed), SFT, reward model
stages     stage checkpoints shared between notebooks (``load_stage``)
rewards    verifiable reward functions (never raise)
rl         small RL experiments: bandits, cliff walk, IS, Monte Carlo, MCTS
evaluation batched generation, accuracy / format rate on held-out data
plotting   figures; every function returns ``(fig, ax)``
checks     ``compare`` from-scratch code with the library
results    per-notebook metrics -> ``build/RESULTS.md``
course     the notebook map and the English-Chinese glossary
compat     CPU fallback for TRL 1.15's Triton-only log-prob kernel
========== ==========================================================
"""
from .compat import install_trl_cpu_fallback

__version__ = "0.1.0"

# TRL 1.15 needs this on machines without Triton (every CPU-only machine); see compat.
TRL_CPU_FALLBACK = install_trl_cpu_fallback()
