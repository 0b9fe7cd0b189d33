"""Supervised fine-tuning (the course's notebook 02) as a script, configured the TRL way.

    python scripts/sft.py --config scripts/recipes/sft_qwen3.yaml
    accelerate launch --config_file scripts/accelerate/zero2.yaml scripts/sft.py --config scripts/recipes/sft_qwen3.yaml

Any config key can be overridden on the command line (``--learning_rate 1e-4``).
Default data: the course's arithmetic chats (``course_utils.data.sft_rows``).
"""
from _common import (CourseScriptArguments, load_model, load_tokenizer, make_parser as _make_parser, parse,
                     prepare, train_and_save, train_dataset)


def make_parser():
    from trl import SFTConfig
    return _make_parser(SFTConfig, CourseScriptArguments)


def main(script_args, training_args, model_args):
    from trl import SFTTrainer, get_peft_config

    from course_utils import data

    prepare(training_args, model_args)
    trainer = SFTTrainer(
        model=load_model(model_args), args=training_args, processing_class=load_tokenizer(model_args),
        train_dataset=train_dataset(script_args, data.sft_rows), peft_config=get_peft_config(model_args))
    train_and_save(trainer, training_args)


if __name__ == "__main__":
    main(*parse(make_parser()))
