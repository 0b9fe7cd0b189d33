"""What the course's training scripts share: arguments, the CPU fallback, loading, data, saving.

The scripts follow TRL's own ``trl/scripts/{sft,dpo,grpo}.py``: one ``TrlParser`` over
(script arguments, the trainer's config, ``trl.ModelConfig``), a YAML recipe passed with
``--config`` and command-line flags that override it. Unlike TRL's scripts they fail on
unknown YAML keys, so a recipe written for another TRL / transformers release is caught
at parse time instead of being silently ignored.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from course_utils.compat import install_trl_cpu_fallback


@dataclass
class CourseScriptArguments:
    """Which data to train on: the course's shipped data unless ``dataset_name`` is given."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Hub id or local path for datasets.load_dataset; None = the course's own data/ files."})
    dataset_config: str | None = field(
        default=None, metadata={"help": "Configuration name passed to datasets.load_dataset (its `name`)."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    train_size: int | None = field(
        default=None, metadata={"help": "Train on the first N rows of the split (None = all of them)."})

    def __post_init__(self):
        if self.train_size is not None and self.train_size < 1:
            raise ValueError(f"train_size must be a positive number of rows, got {self.train_size}")


def make_parser(config_class, script_args_class=CourseScriptArguments):
    """A ``TrlParser`` over (script arguments, ``config_class``, ``trl.ModelConfig``)."""
    from trl import ModelConfig, TrlParser
    return TrlParser((script_args_class, config_class, ModelConfig))


def parse(parser, args: list[str] | None = None):
    """Parse ``--config`` YAML plus command-line overrides into ``(script_args, training_args, model_args)``.

    Without CUDA, ``--use_cpu true`` goes first: TRL's configs default to bf16, and
    transformers refuses bf16 on a machine with no GPU unless ``use_cpu`` is set, so a
    GPU recipe could not even be parsed here. An explicit ``--use_cpu`` on the command line wins.
    Unknown keys, in the YAML or on the command line, are an error.
    """
    args = list(sys.argv[1:] if args is None else args)
    if not torch.cuda.is_available() and "--use_cpu" not in args:
        print("No CUDA: parsing with --use_cpu true")
        args = ["--use_cpu", "true"] + args
    script_args, training_args, model_args = parser.parse_args_and_config(args)
    if model_args.model_name_or_path is None:
        raise ValueError("--model_name_or_path is required (a hub id such as Qwen/Qwen3-0.6B or a local folder)")
    if training_args.trust_remote_code:
        raise ValueError("trust_remote_code=True is not allowed: the course runs no code shipped with a model")
    return script_args, training_args, model_args


def prepare(training_args, model_args=None) -> dict:
    """On a machine without CUDA, switch a GPU recipe to settings a CPU can run; returns what changed.

    As ``course_utils.run_config.Profile.trainer_kwargs`` does for the notebooks: bf16/fp16
    off, gradient checkpointing off (an order of magnitude slower on a CPU, for memory
    a tiny run does not need), ``use_cpu`` on. Also installs the dense stand-in for
    TRL's Triton log-prob kernel, turns off vLLM (it needs a GPU) and loads bf16
    weights as float32 (without bf16 autocast they would train in pure bf16).
    On a GPU before Ampere (compute capability below 8.0: a T4, a V100), a recipe's bf16 becomes fp16 mixed precision
    over float32 weights, as ``Profile.mixed_precision`` does for the notebooks: those cards have no bfloat16 units.
    Otherwise on a GPU machine nothing changes.
    """
    if torch.cuda.is_available():
        return _fp16_before_ampere(training_args, model_args)
    install_trl_cpu_fallback()
    wanted = {"bf16": False, "fp16": False, "gradient_checkpointing": False, "use_cpu": True}
    if hasattr(training_args, "use_vllm"):
        wanted["use_vllm"] = False
    changed = {}
    for name, value in wanted.items():
        if getattr(training_args, name) != value:
            changed[name] = (getattr(training_args, name), value)
            setattr(training_args, name, value)
    if "bf16" in changed or "fp16" in changed:
        # __post_init__ already turned bf16 into the Accelerator's mixed_precision: undo it too
        training_args.mixed_precision = "no"
    if model_args is not None and model_args.dtype in ("bfloat16", "float16", "auto"):
        changed["dtype"] = (model_args.dtype, "float32")
        model_args.dtype = "float32"
    if changed:
        print("No CUDA: CPU fallback applied: " + ", ".join(f"{k} {old!r} -> {new!r}"
                                                           for k, (old, new) in changed.items()))
    return changed


def _fp16_before_ampere(training_args, model_args=None) -> dict:
    """On a card before Ampere, bf16 -> fp16 mixed precision, and bfloat16 weights -> float32 (the gradient scaler
    refuses float16 gradients); what changed."""
    if not training_args.bf16 or torch.cuda.get_device_capability(0)[0] >= 8:
        return {}
    training_args.bf16, training_args.fp16, training_args.mixed_precision = False, True, "fp16"
    changed = {"bf16": (True, False), "fp16": (False, True)}
    if model_args is not None and model_args.dtype in ("bfloat16", "float16", "auto"):
        changed["dtype"] = (model_args.dtype, "float32")
        model_args.dtype = "float32"
    print("A GPU before Ampere (no bfloat16): " + ", ".join(f"{k} {old!r} -> {new!r}"
                                                          for k, (old, new) in changed.items()))
    return changed


def load_model(model_args):
    """``AutoModelForCausalLM`` from ``model_args`` (dtype, revision, attention, 4/8-bit); no remote code."""
    from accelerate import PartialState
    from transformers import AutoModelForCausalLM
    from trl import get_quantization_config

    dtype = model_args.dtype
    if dtype not in (None, "auto"):
        dtype = getattr(torch, dtype)
    quantization_config = get_quantization_config(model_args)
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path, revision=model_args.model_revision, dtype=dtype,
        attn_implementation=model_args.attn_implementation, quantization_config=quantization_config,
        # a 4/8-bit model must be placed at load time, whole on this process's GPU (TRL 1.15 dropped
        # its get_kbit_device_map helper for this); an ordinary model is placed by the Trainer
        device_map={"": PartialState().local_process_index} if quantization_config is not None else None,
        trust_remote_code=False)


def load_tokenizer(model_args):
    """The model's tokenizer (with its chat template); no remote code."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision,
                                         trust_remote_code=False)


def train_dataset(script_args, course_rows: Callable[[str, int | None], list[dict]]):
    """The training split: ``course_rows(split, n)`` from the course's data, or ``--dataset_name`` from datasets."""
    from accelerate import PartialState
    from datasets import Dataset, load_dataset

    n = script_args.train_size
    # Under `accelerate launch` every process runs this. The first process of each machine builds the data set
    # (downloads it, fills the datasets cache) while the others wait, then they read the cache: one download, no
    # race on the cache files. TRL's SFT, DPO and reward trainers tokenise under the same kind of guard
    # (trl.trainer.utils.global_then_local_main_first: the global main process first, then each machine's).
    with PartialState().local_main_process_first():
        if script_args.dataset_name is None:
            return Dataset.from_list(course_rows(script_args.dataset_train_split, n))
        dataset = load_dataset(script_args.dataset_name, script_args.dataset_config,
                               split=script_args.dataset_train_split)
        return dataset if n is None else dataset.select(range(min(n, len(dataset))))


def report_processes(trainer) -> None:
    """After training: one line from every process, and the global batch once (from the main process).

    Under ``accelerate launch`` each process runs this whole script on its own share of every batch, so one
    optimizer step sees ``per_device_train_batch_size x gradient_accumulation_steps x processes`` rows (for
    GRPO: completions). tests/test_scripts.py reads these lines to check that both ranks of a 2-process run trained.
    """
    from accelerate import PartialState
    state, args = PartialState(), trainer.args
    print(f"process {state.process_index} of {state.num_processes} ({state.distributed_type.value}, backend "
          f"{state.backend}): {trainer.state.global_step} optimizer steps", flush=True)
    if state.is_main_process:
        per_device, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
        print(f"global batch {per_device * accumulation * state.num_processes} = {per_device} per device x "
              f"{accumulation} accumulation steps x {state.num_processes} processes", flush=True)


def train_and_save(trainer, training_args) -> Path:
    """Train (resuming if asked), then save weights (safetensors) and tokenizer to ``output_dir``."""
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    report_processes(trainer)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}")
    # every process waits here, then the process group is torn down: a rank that exits with gloo's threads still
    # running can abort ("terminate called without an active exception") and fail the launch
    trainer.accelerator.wait_for_everyone()
    # A gloo worker thread frees the barrier's finished collectives after it returns, and freeing their tensors
    # takes the GIL. At exit the process group's destructor joins that thread while holding the GIL: if the thread
    # has not run by then, both wait forever (a hang after "Model saved", seen with py-spy). The pause lets it run.
    if trainer.accelerator.num_processes > 1:
        time.sleep(1.0)
    trainer.accelerator.end_training()
    return Path(training_args.output_dir)
