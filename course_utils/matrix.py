"""The test matrix: every notebook on models of other families, at the smoke scale, offline.

A learner's own model reaches the course through one switch (env ``COURSE_MODEL``, or
``Params(model_id=...)``) and :mod:`course_utils.adapt`. This module proves that path runs: it
builds tiny models of two other families from configs, with tokenizers of their own trained here
on the course's texts (no download),

* ``llama``: a Llama-style model with a byte-level BPE tokenizer, ``<s>`` / ``</s>``, no pad token and
  no chat template;
* ``gpt2``: a GPT-2-style model whose single ``<|endoftext|>`` is BOS and EOS, no pad token, no
  template, learned positions;

saves each as a local folder (safetensors), and runs notebooks under ``COURSE_MODEL=<folder>`` and
``COURSE_SCALE=smoke`` (every recipe's steps and sizes cut: :data:`recipes` ``SMOKE``), each family in its
own artifacts folder. A notebook passes when it executes, records its results for that model and prints
``NOT CHECKED`` where the course's thresholds would assert (04 loads no language model: its checks assert). The models are random: nothing they measure
is a result, only that every branch of the hub path runs.

``python -m course_utils.matrix`` (what ``make matrix`` calls) runs all of it and writes
``build/MATRIX.md``; ``make test`` runs the part ``tests/test_matrix.py`` picks.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .paths import artifacts_root, notebook_files, repo_root

FAMILIES = ("llama", "gpt2")
MATRIX_NOTEBOOKS = ("02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12")
MODEL_FREE = ("04",)   # its bandits and grid worlds load no language model: its checks assert on any model
POSITIONS = 512   # longer than any course chat (SFT truncates at 256 tokens): GPT-2's positions are learned
SIZES = {   # family_model's shapes: the matrix's (built in a second) and the course model's (to pretrain)
    "matrix": dict(vocab=400, hidden=32, mlp=64, layers=1, heads=2, kv_heads=1),
    "course": dict(vocab=640, hidden=96, mlp=256, layers=4, heads=4, kv_heads=2),
}


def byte_bpe(special: list[str], vocab_size: int = 400, texts: list[str] | None = None, split_digits: bool = False):
    """A byte-level BPE trained on ``texts`` (default: 500 train chats) with the tags' angle brackets removed, so it
    has never seen the course's tags as tokens (as a real model's tokenizer has not). ``split_digits`` makes every
    digit a token of its own, as Llama's and SmolLM's tokenizers do."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from .data import load_jsonl

    if texts is None:
        texts = [r["question"] + " " + r["completion"] for r in load_jsonl("arithmetic", "train")[:500]]
    texts = [t.replace("<", " ").replace(">", " ") for t in texts]
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def family_model(family: str, seed: int = 0, size: str = "matrix"):
    """A random model of ``family`` (see the module docstring) and its tokenizer, built in about a second.

    ``size="matrix"``: the matrix's (one layer, width 32, a 400-token BPE). ``size="course"``: the course's own
    model's shape (4 layers, width 96, 4 heads, 2 KV heads) with a BPE of up to 640 tokens learned from the corpus
    and the train chats, digits one token each: what :mod:`course_utils.base_model` pretrains.
    """
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {tuple(SIZES)}")
    dims = SIZES[size]
    texts = None
    if size == "course":
        from .modeling import tokenizer_training_texts
        texts = tokenizer_training_texts()
    bpe = dict(vocab_size=dims["vocab"], texts=texts, split_digits=size == "course")
    if family == "llama":
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=byte_bpe(["<s>", "</s>"], **bpe), bos_token="<s>",
                                            eos_token="</s>")
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=dims["hidden"], intermediate_size=dims["mlp"],
                             num_hidden_layers=dims["layers"], num_attention_heads=dims["heads"],
                             num_key_value_heads=dims["kv_heads"], max_position_embeddings=POSITIONS,
                             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        cls = LlamaForCausalLM
    elif family == "gpt2":
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=byte_bpe(["<|endoftext|>"], **bpe),
                                            bos_token="<|endoftext|>", eos_token="<|endoftext|>")
        config = GPT2Config(vocab_size=len(tokenizer), n_embd=dims["hidden"], n_layer=dims["layers"],
                            n_head=dims["heads"], n_positions=POSITIONS,   # GPT-2's MLP: 4 x width
                            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        cls = GPT2LMHeadModel
    else:
        raise ValueError(f"unknown family {family!r}; choose one of {FAMILIES}")
    torch.manual_seed(seed)
    return cls(config), tokenizer


def save_family_model(family: str, folder: Path) -> Path:
    """``family_model(family)`` saved to ``folder`` as a hub-style local folder (safetensors), once."""
    folder = Path(folder)
    if not (folder / "model.safetensors").is_file():
        model, tokenizer = family_model(family)
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    return folder


@dataclass(frozen=True)
class Cell:
    """One notebook on one family: did it run, record its results and decline to assert."""

    family: str
    notebook: str
    ok: bool
    seconds: float
    why: str = ""


def notebook_path(number: str) -> Path:
    matches = [p for p in notebook_files() if p.name.startswith(f"{number}_")]
    if not matches:
        raise FileNotFoundError(f"no notebook numbered {number} in notebooks/")
    return matches[0]


def outputs_text(executed: Path) -> str:
    """All text an executed notebook printed (streams and plain-text results)."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain") or ""
            parts.append(text if isinstance(text, str) else "".join(text))
    return "\n".join(parts)


def run_cell(family: str, number: str, root: Path, timeout: int = 900) -> Cell:
    """Run notebook ``number`` on ``family``'s model at the smoke scale under ``root`` and judge it."""
    model_dir = save_family_model(family, root / "models" / family)
    artifacts, out = root / family / "artifacts", root / family / "build"
    notebook = notebook_path(number)
    env = dict(os.environ, COURSE_MODEL=str(model_dir), COURSE_SCALE="smoke", COURSE_ARTIFACTS=str(artifacts),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "course_utils.runner", "--one", str(notebook), "--out", str(out),
                           "--timeout", str(timeout)], env=env, capture_output=True, text=True)
    seconds = time.time() - t0
    if proc.returncode != 0:
        return Cell(family, notebook.stem, False, seconds, (proc.stderr or proc.stdout)[-3000:])
    record_file = artifacts / "results" / f"{notebook.stem}.json"
    if not record_file.is_file():
        return Cell(family, notebook.stem, False, seconds, f"no results file {record_file}")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    if record.get("model") != str(model_dir):
        return Cell(family, notebook.stem, False, seconds, f"results recorded for model {record.get('model')!r}")
    text = outputs_text(out / "notebooks" / notebook.name)
    if number not in MODEL_FREE and "NOT CHECKED" not in text:
        return Cell(family, notebook.stem, False, seconds, "its check cell did not print NOT CHECKED")
    return Cell(family, notebook.stem, True, seconds)


def matrix_markdown(cells: list[Cell]) -> str:
    """The matrix as Markdown: one row per notebook, one column per family (ok / FAILED and seconds)."""
    families = sorted({c.family for c in cells}, key=FAMILIES.index)
    rows = ["| notebook | " + " | ".join(families) + " |", "|---|" + "---|" * len(families)]
    for nb in sorted({c.notebook for c in cells}):
        by = {c.family: c for c in cells if c.notebook == nb}
        rows.append(f"| {nb} | " + " | ".join(
            (f"ok, {by[f].seconds:.0f} s" if by[f].ok else f"FAILED, {by[f].seconds:.0f} s") if f in by else ""
            for f in families) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--notebooks", nargs="+", default=list(MATRIX_NOTEBOOKS), help="notebook numbers")
    parser.add_argument("--root", type=Path, default=artifacts_root() / "matrix",
                        help="models, artifacts and executed notebooks of the matrix (default: <artifacts>/matrix)")
    parser.add_argument("--out", type=Path, default=repo_root() / "build" / "MATRIX.md")
    args = parser.parse_args(argv)
    cells = []
    for family in args.families:
        for number in args.notebooks:
            cell = run_cell(family, number, args.root)
            cells.append(cell)
            print(f"{family:6s} {cell.notebook}: {'ok' if cell.ok else 'FAILED'} in {cell.seconds:.0f} s", flush=True)
            if not cell.ok:
                print(cell.why, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from .environment import environment_record
    env = environment_record()
    args.out.write_text("# The model matrix (smoke scale)\n\nMade by `make matrix` on "
                        f"{env['cpu']} ({env['cpu_capability']}, {env['torch_threads']} threads), commit {env['commit']}.\n\n" + matrix_markdown(cells),
                        encoding="utf-8")
    print(matrix_markdown(cells))
    return 0 if all(c.ok for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
