"""A small base model of another family, pretrained here: the stand-in for "your own model" on a CPU.

The course's path for a model you bring (``COURSE_MODEL``, :mod:`course_utils.adapt`) is exercised by the model
matrix on random models, which learn nothing. A full-scale run needs a *base model*: one that has read text, as a
hub checkpoint has, but that nothing here may download. This module makes one: a Llama- (or GPT-2-) style model
of the course model's shape (:func:`course_utils.modeling.family_model` with ``size="course"``: 4 layers, width 96,
a byte-level BPE of its own of up to 640 tokens, 591 from the corpus, digits split, ``<s>``/``</s>``), pretrained
on the course corpus with 01's recipe and trainer, and saved as a hub-style folder **without** a pad token or a
chat template, as base models ship::

    python -m course_tools.base_model llama --out artifacts/own/llama
    COURSE_MODEL=artifacts/own/llama make course

It is another family, tokenizer and initialisation than the course's Qwen3; it read the same corpus, so its base
skills are comparable, which is what lets the course's effects be compared on it.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from course_utils.modeling import FAMILIES, family_model


def pretrain_family_model(family: str, folder: str | Path, seed: int = 1234, steps: int | None = None) -> Path:
    """Pretrain ``family_model(family, size="course")`` on the corpus with 01's recipe; save it to ``folder``.

    ``steps`` overrides the recipe's (a test's short run). Built once: a folder whose ``base_model.json`` records
    the same family, seed and recipe is returned as it is. Saved with neither pad token nor chat template.
    """
    from course_utils.run_config import get_profile, seed_everything
    from course_utils.recipes import recipe_for
    from course_utils.training import pretrain_trainer

    folder = Path(folder)
    profile = get_profile("cpu-tiny", seed=seed)
    recipe = recipe_for("pretrain", profile, **({} if steps is None else {"steps": steps}))
    inputs = json.loads(json.dumps({"family": family, "size": "course", "seed": seed, "recipe": asdict(recipe)}))
    record = folder / "base_model.json"
    if (folder / "model.safetensors").is_file() and record.is_file():
        saved = json.loads(record.read_text(encoding="utf-8"))
        if {k: saved.get(k) for k in inputs} == inputs:
            return folder
    seed_everything(seed)
    model, tokenizer = family_model(family, seed=seed, size="course")
    trainer = pretrain_trainer(model, tokenizer, profile, recipe, folder / "trainer")
    trainer.train()
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    shutil.rmtree(folder / "trainer", ignore_errors=True)
    info = {**inputs, "parameters": sum(p.numel() for p in model.parameters()),
            "validation_loss": [round(h["eval_loss"], 4) for h in trainer.state.log_history if "eval_loss" in h]}
    record.write_text(json.dumps(info, indent=1), encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("family", choices=FAMILIES)
    parser.add_argument("--out", type=Path, required=True, help="the folder to save the model in")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    folder = pretrain_family_model(args.family, args.out, seed=args.seed)
    info = json.loads((folder / "base_model.json").read_text(encoding="utf-8"))
    print(f"{args.family} base model in {folder}: {info['parameters']:,} parameters; validation loss "
          + " -> ".join(str(x) for x in info["validation_loss"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
