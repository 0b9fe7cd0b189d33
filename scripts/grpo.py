"""GRPO with verifiable rewards (the course's notebook 07) as a script, configured the TRL way.

    python scripts/grpo.py --config scripts/recipes/grpo_qwen3.yaml
    accelerate launch --config_file scripts/accelerate/zero2.yaml scripts/grpo.py --config scripts/recipes/grpo_qwen3.yaml

Default data: the course's arithmetic problems as ``{"prompt", "answer"}`` rows
(``course_utils.grpo.grpo_rows``). ``--reward_funcs`` names functions of
``course_utils.rewards``; the recipe's comments show vLLM in colocate and server mode.
"""
from dataclasses import dataclass, field

from _common import (CourseScriptArguments, load_model, load_tokenizer, make_parser as _make_parser, parse,
                     prepare, train_and_save, train_dataset)

DEFAULT_REWARDS = ["accuracy_reward", "format_reward"]


@dataclass
class GRPOScriptArguments(CourseScriptArguments):
    """The course's data arguments plus the reward functions."""

    reward_funcs: list[str] = field(
        default_factory=lambda: list(DEFAULT_REWARDS),
        metadata={"help": "Names of reward functions in course_utils.rewards, e.g. accuracy_reward format_reward."})


def available_rewards() -> dict:
    """Name -> function for every ``*_reward`` function defined in ``course_utils.rewards``."""
    from course_utils import rewards
    return {name: fn for name, fn in vars(rewards).items()
            if name.endswith("_reward") and callable(fn) and getattr(fn, "__module__", None) == rewards.__name__}


def reward_functions(names: list[str]) -> list:
    """The reward functions called ``names``; an unknown name is an error that lists the valid ones."""
    available = available_rewards()
    unknown = [n for n in names if n not in available]
    if unknown or not names:
        raise ValueError(f"unknown reward function(s) {unknown or names}: --reward_funcs takes names from "
                         f"course_utils.rewards, one or more of {sorted(available)}")
    return [available[n] for n in names]


def make_parser():
    from trl import GRPOConfig
    return _make_parser(GRPOConfig, GRPOScriptArguments)


def main(script_args, training_args, model_args):
    from trl import GRPOTrainer, get_peft_config

    from course_utils import data
    from course_utils.grpo import grpo_rows

    reward_funcs = reward_functions(script_args.reward_funcs)   # before loading anything: fail fast on a typo
    if training_args.remove_unused_columns:
        # TRL would drop `answer` before the rewards see it; accuracy_reward then has nothing to check
        raise ValueError("GRPO needs remove_unused_columns=False: the reward functions read the data set's "
                         "`answer` column, which TRL drops otherwise")
    prepare(training_args, model_args)
    trainer = GRPOTrainer(
        model=load_model(model_args), reward_funcs=reward_funcs, args=training_args,
        processing_class=load_tokenizer(model_args),
        train_dataset=train_dataset(script_args, lambda split, n: grpo_rows(data.load_jsonl("arithmetic", split, n))),
        peft_config=get_peft_config(model_args))
    train_and_save(trainer, training_args)


if __name__ == "__main__":
    main(*parse(make_parser()))
