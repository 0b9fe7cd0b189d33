"""Run profiles: the parameters every notebook starts from.

A notebook's parameters cell names a profile; everything that differs between a
laptop CPU and a GPU box lives here (the training knobs of each stage live in
``recipes``), so switching is one line::

    profile = get_profile("auto")         # cpu-tiny without CUDA, gpu with it
    profile = get_profile("gpu", model_id="Qwen/Qwen3-1.7B")

``cpu-tiny`` trains the course's own tiny Qwen3 on the shipped data; ``gpu`` loads
a real hub model (needs internet the first time, then the HF cache).
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import subprocess
from dataclasses import dataclass, replace

import numpy as np
import torch

DEFAULT_SEED = 1234
PROFILES = ("auto", "cpu-tiny", "gpu")
SCALES = ("full", "smoke")
MIN_EVAL_SIZE = 200   # the smallest held-out set evaluation.heldout_problems accepts; the smoke scale evaluates on it
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
"""The oldest NVIDIA driver (Linux, major version) that runs a torch built for each CUDA major version, under CUDA's
minor-version compatibility (NVIDIA's CUDA compatibility guide). PyPI's Linux torch 2.13.0 wheel is a CUDA 13.0
build (it requires ``cuda-toolkit==13.0.3``): with an older driver torch sees no GPU at all."""


@dataclass(frozen=True)
class Profile:
    """Everything a notebook needs to know about where and what it runs.

    Attributes:
        name: ``"cpu-tiny"`` or ``"gpu"`` (``"auto"`` is resolved before this exists).
        model_id: hub id or local folder of the base model (on either profile; env ``COURSE_MODEL``);
            ``None`` on ``cpu-tiny`` means "the course's own model, built by ``load_stage``".
        seed: seed for python, numpy and torch (env ``COURSE_SEED`` overrides the default).
        device: ``"cpu"`` or ``"cuda"``.
        dtype: parameter dtype for training (float32 on CPU; on a GPU bfloat16 from Ampere on, float32 before it:
            see :attr:`mixed_precision`).
        eval_size: problems in the held-out evaluation (>= 200 so 5 points is real).
        max_new_tokens: generation budget for evaluation.
        threads: torch's intra-op threads, set by :func:`get_profile` (cpu-tiny: env
            ``COURSE_THREADS``, else 2 or fewer cores; the order of a float sum, and so the
            numbers, can move with it).
        scale: ``"full"`` (the course) or ``"smoke"`` (env ``COURSE_SCALE``): every recipe's steps and sizes
            cut to their ``SMOKE`` values, to see that a notebook *runs* on a model in minutes (the test
            matrix); nothing a smoke run measures is a result, and its check cells never assert.
    """

    name: str
    model_id: str | None
    seed: int
    device: str
    dtype: torch.dtype
    eval_size: int = 300
    max_new_tokens: int = 48
    threads: int | None = None
    scale: str = "full"

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def mixed_precision(self) -> str | None:
        """The trainers' half precision: ``None`` on the CPU; on a GPU ``"bf16"`` where the parameters are bfloat16
        (compute capability 8.0, Ampere, and later), else ``"fp16"``, the only half precision before Ampere.

        An fp16 run keeps trained parameters in float32: the Trainer's gradient scaler refuses float16 gradients
        ("Attempting to unscale FP16 gradients"), so a model trained in full loads in float32 there (``dtype``) and
        runs its forward under fp16 autocast. unsloth (notebook 11) loads the base in float16 itself before Ampere and
        trains only float32 LoRA weights, and its trainers raise unless ``fp16`` is the flag set
        ("Model is in float16 precision but you want to use bfloat16").
        """
        if self.is_cpu:
            return None
        return "bf16" if self.dtype == torch.bfloat16 else "fp16"

    @property
    def slug(self) -> str:
        """A folder name for this profile's checkpoints: the profile plus its base model.

        ``cpu-tiny`` for the course's own model; ``gpu-Qwen--Qwen3-0.6B`` for a hub id;
        a local folder gets its name plus a short hash of its full path, so two
        folders called ``model`` never share checkpoints.
        """
        if self.model_id is None:
            return self.name
        model = self.model_id.rstrip("/")
        if os.sep in model and (model.startswith((".", os.sep, "~")) or os.path.isdir(model)):
            digest = hashlib.sha1(os.path.abspath(os.path.expanduser(model)).encode()).hexdigest()[:8]
            model = f"{os.path.basename(model)}-{digest}"
        return f"{self.name}-" + re.sub(r"[^A-Za-z0-9._-]+", "-", model.replace("/", "--"))

    def trainer_kwargs(self, **overrides) -> dict:
        """Arguments for ``TrainingArguments`` / TRL configs that are safe here.

        TRL's defaults (``bf16=True``, ``gradient_checkpointing=True``) crash or run
        an order of magnitude slower on a CPU; these switch them off and keep runs
        quiet, local and reproducible. On a GPU ``bf16`` or ``fp16`` follows
        :attr:`mixed_precision` (the device's capability). ``overrides`` win.
        """
        kwargs = dict(
            seed=self.seed, data_seed=self.seed, report_to="none", save_strategy="no",
            logging_strategy="steps", disable_tqdm=False, remove_unused_columns=True,
            dataloader_pin_memory=False, dataloader_num_workers=0,
        )
        if self.is_cpu:
            kwargs.update(bf16=False, fp16=False, gradient_checkpointing=False, use_cpu=True)
        else:
            kwargs.update(bf16=self.mixed_precision == "bf16", fp16=self.mixed_precision == "fp16",
                          gradient_checkpointing=True)
        kwargs.update(overrides)
        return kwargs


def bf16_supported() -> bool:
    """Whether the current CUDA device computes in bfloat16: compute capability 8.0 (Ampere) or later.

    The capability decides, as in unsloth: ``torch.cuda.is_bf16_supported()`` also answers True where bfloat16 is
    only emulated (a T4, capability 7.5), where unsloth loads a model in float16.
    """
    major, _minor = torch.cuda.get_device_capability()
    return major >= 8


def nvidia_smi() -> dict | None:
    """What ``nvidia-smi`` reports: ``{"gpus": [...], "driver": "535.104.05", "cuda": "12.2"}`` (the CUDA version is
    the newest the driver runs); ``None`` where there is no ``nvidia-smi`` or it fails (no NVIDIA driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe], capture_output=True, text=True, timeout=20)
        names = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    driver = re.search(r"Driver Version:\s*([0-9.]+)", done.stdout)
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", done.stdout)
    return {"gpus": [n.strip() for n in names.stdout.splitlines() if n.strip()] if names.returncode == 0 else [],
            "driver": driver.group(1) if driver else None, "cuda": cuda.group(1) if cuda else None}


def no_cuda_reason(smi: dict | None = None) -> str:
    """Why torch sees no GPU here, in a sentence: a CPU-only build, a driver older than the build needs (the
    build's CUDA version, ``torch.version.cuda``, against what ``nvidia-smi`` reports), or no NVIDIA driver at all.

    ``smi``: :func:`nvidia_smi`'s report (default: asked now).
    """
    smi = nvidia_smi() if smi is None else smi
    built = torch.version.cuda
    if built is None:
        return (f"this torch ({torch.__version__}) is a CPU-only build; install a CUDA build, e.g. "
                f"`make install GPU=1` or `pip install torch` from PyPI")
    major = int(built.split(".")[0])
    need = MIN_DRIVER.get(major)
    wants = f"torch {torch.__version__} is built for CUDA {built}" + (
        f", which needs an NVIDIA driver >= {need}" if need else "")
    if not smi:
        return f"{wants}, and no NVIDIA driver answers here (no working `nvidia-smi`)"
    seen = f"nvidia-smi reports {', '.join(smi['gpus']) or 'a GPU'} with driver {smi['driver']} (CUDA {smi['cuda']})"
    driver_major = int(str(smi["driver"]).split(".")[0]) if smi.get("driver") else None
    if need and driver_major is not None and driver_major < need:
        return (f"{wants}, but {seen}: update the driver to >= {need}, or install a torch built for the CUDA "
                f"version the driver runs")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"{wants}, and {seen}, yet torch sees no device"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
            + "; torch's own warning above says why")


def resolve_seed(seed: int | None = None) -> int:
    """``seed`` if given, else env ``COURSE_SEED``, else the course default."""
    if seed is not None:
        return int(seed)
    env = os.environ.get("COURSE_SEED")
    if env is None or env == "":
        return DEFAULT_SEED
    try:
        return int(env)
    except ValueError:
        raise ValueError(f"COURSE_SEED must be an integer, got {env!r}") from None


def resolve_threads(name: str) -> int:
    """env ``COURSE_THREADS`` if set, else 2 (or fewer cores) on cpu-tiny, torch's default on a GPU."""
    env = os.environ.get("COURSE_THREADS")
    if env:
        try:
            threads = int(env)
        except ValueError:
            raise ValueError(f"COURSE_THREADS must be a positive integer, got {env!r}") from None
        if threads < 1:
            raise ValueError(f"COURSE_THREADS must be a positive integer, got {env!r}")
        return threads
    # the tiny model's matrices are too small for more than 2 threads to pay (``make bench``)
    return min(2, os.cpu_count() or 1) if name == "cpu-tiny" else torch.get_num_threads()


def resolve_scale(scale: str | None = None) -> str:
    """``scale`` if given, else env ``COURSE_SCALE``, else ``"full"``."""
    scale = scale or os.environ.get("COURSE_SCALE") or "full"
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r} (COURSE_SCALE); choose one of {SCALES}")
    return scale


def get_profile(name: str = "auto", *, model_id: str | None = None, seed: int | None = None,
                **overrides) -> Profile:
    """Resolve a profile name to a :class:`Profile`.

    Args:
        name: ``"auto"`` (``gpu`` when CUDA is available, else ``cpu-tiny``, saying why where torch is a CUDA build
            or an NVIDIA driver answers), ``"cpu-tiny"`` or ``"gpu"`` (a request for the GPU: without one it raises,
            naming the reason, :func:`no_cuda_reason`; on the GPU the dtype follows the device, :func:`bf16_supported`).
        model_id: the base model instead of the profile's: a hub id or a local folder (safetensors, no remote
            code); default: env ``COURSE_MODEL``, else the course's tiny model on ``cpu-tiny`` and Qwen3-0.6B on
            ``gpu``. Its generation budget is measured from its tokenizer (``adapt.budget_for``).
        seed: override the seed (default: env ``COURSE_SEED`` or 1234).
        overrides: any other :class:`Profile` field (``scale`` defaults to env ``COURSE_SCALE``, else
            ``"full"``; ``"smoke"`` also evaluates on the smallest held-out set allowed, 200 problems).

    Sets torch's thread count to the profile's ``threads``.
    """
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {PROFILES}")
    if name == "auto":
        name = "gpu" if torch.cuda.is_available() else "cpu-tiny"
        if name == "cpu-tiny":
            smi = nvidia_smi()
            if smi or torch.version.cuda is not None:   # a GPU may have been meant: say why it is not used
                print(f"profile 'auto' runs on the CPU (cpu-tiny): {no_cuda_reason(smi)}.")
    seed = resolve_seed(seed)
    model_id = model_id if model_id is not None else (os.environ.get("COURSE_MODEL") or None)
    if name == "cpu-tiny":
        prof = Profile(name=name, model_id=None, seed=seed, device="cpu", dtype=torch.float32)
    else:
        if not torch.cuda.is_available():
            raise RuntimeError(f"profile 'gpu' needs CUDA, and torch sees no GPU here: {no_cuda_reason()}. "
                               f"(Profile 'cpu-tiny' or 'auto' runs the CPU path instead.)")
        dtype = torch.bfloat16 if bf16_supported() else torch.float32   # before Ampere: fp16 autocast, fp32 weights
        prof = Profile(name=name, model_id="Qwen/Qwen3-0.6B", seed=seed, device="cuda",
                       dtype=dtype, eval_size=300, max_new_tokens=256)
    if model_id is not None:
        from .adapt import budget_for   # the course's answers in this model's tokens, tags as whole tokens
        budget = budget_for(model_id)
        prof = replace(prof, model_id=model_id,
                       max_new_tokens=budget if prof.is_cpu else max(prof.max_new_tokens, budget))
    scale = resolve_scale(overrides.pop("scale", None))
    if scale == "smoke":
        prof = replace(prof, scale=scale, eval_size=MIN_EVAL_SIZE)
    prof = replace(prof, **overrides) if overrides else prof
    if prof.threads is None:
        prof = replace(prof, threads=resolve_threads(prof.name))
    torch.set_num_threads(prof.threads)
    quiet_loading_bars()
    return prof


def quiet_loading_bars() -> None:
    """Switch off the progress bars of loading weights (transformers, the hub) and of ``Dataset.map`` (datasets).

    A course model loads and maps in a blink, so each bar says nothing live, and in an executed copy (the book) it
    stays frozen at "0/46" as a widget. The course's own loops and the trainers' tables keep their bars.
    """
    import datasets
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
