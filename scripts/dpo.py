"""Direct preference optimisation (the course's notebook 06) as a script, configured the TRL way.

    python scripts/dpo.py --config scripts/recipes/dpo_qwen3.yaml
    accelerate launch --config_file scripts/accelerate/zero2.yaml scripts/dpo.py --config scripts/recipes/dpo_qwen3.yaml

Default data: the course's preference pairs (``course_utils.data.preference_rows``).
With ``--use_peft`` the reference model is the same network with the adapter switched
off; without it a second, frozen copy is loaded.
"""
from _common import (CourseScriptArguments, load_model, load_tokenizer, make_parser as _make_parser, parse,
                     prepare, train_and_save, train_dataset)


def make_parser():
    from trl import DPOConfig
    return _make_parser(DPOConfig, CourseScriptArguments)


def main(script_args, training_args, model_args):
    from trl import DPOTrainer, get_peft_config

    from course_utils import data

    prepare(training_args, model_args)
    peft_config = get_peft_config(model_args)
    # Loaded here rather than by TRL so the reference has the policy's dtype (TRL would default to float32)
    ref_model = None if peft_config is not None else load_model(model_args)
    trainer = DPOTrainer(
        model=load_model(model_args), ref_model=ref_model, args=training_args,
        processing_class=load_tokenizer(model_args), train_dataset=train_dataset(script_args, data.preference_rows),
        peft_config=peft_config)
    train_and_save(trainer, training_args)


if __name__ == "__main__":
    main(*parse(make_parser()))
