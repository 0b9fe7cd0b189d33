import json
import re

import pytest

from course_utils import data
from course_utils.paths import data_dir


def test_shipped_files_regenerate_byte_for_byte():
    generated = data.generated_files()
    shipped = {p.name: p.read_bytes() for p in data_dir().glob("*.jsonl")}
    assert set(generated) == set(shipped)
    for name, text in generated.items():
        assert text.encode("utf-8") == shipped[name], f"{name} differs: run python -m course_utils.data"


def test_write_data_to_other_folder(tmp_path):
    written = data.write_data(tmp_path)
    assert {p.name for p in written} == set(data.generated_files())


def test_splits_are_disjoint_and_cover_all_pairs():
    splits = data.split_pairs()
    sets = {k: set(v) for k, v in splits.items()}
    assert len(sets["test"]) == data.N_TEST_PAIRS >= 200
    assert not (sets["train"] & sets["test"]) and not (sets["train"] & sets["validation"])
    assert not (sets["validation"] & sets["test"])
    assert set().union(*sets.values()) == set(data.all_pairs())


def test_corpus_draws_arithmetic_only_from_train_pairs(monkeypatch):
    """With a one-pair train split, the only numbers >= 10 in the text come from that pair's addition."""
    real = data.split_pairs()
    monkeypatch.setattr(data, "split_pairs", lambda: {**real, "train": [(17, 25)]})
    docs = data.generate_corpus(n_train=300, n_validation=0)["train"]
    numbers = set()
    for doc in docs:
        text = re.sub(r"Counting:[\d ]+\.", " ", doc["text"])          # counting runs are not arithmetic
        text = re.sub(r"</?(think|answer)>", " ", text)                 # tagged solutions: numbers between tags
        words = re.sub(r"[.,:?]", " ", text).split()
        numbers |= {int(w) for w in words if w.isdigit() and int(w) >= 10}
    assert numbers == {17, 25, 42, 12}  # the pair, its sum, and the ones column 7 + 5 = 12


def test_shipped_corpus_uses_the_shipped_split():
    corpus = " ".join(r["text"] for r in data.load_jsonl("corpus", "train"))
    test_pairs = data.split_pairs()["test"]
    assert not any(f"{a} + {b} = {a + b}" in corpus for a, b in test_pairs)
    assert sum(f"{a} + {b} = {a + b}" in corpus for a, b in data.split_pairs()["train"][:300]) > 30


def test_problems_are_consistent():
    for split in data.SPLITS:
        for p in data.load_jsonl("arithmetic", split):
            assert int(p["answer"]) == p["a"] + p["b"]
            assert p["completion"] == data.format_completion(p["a"], p["b"])
            assert str(p["a"]) in p["question"] and str(p["b"]) in p["question"]


def test_preferences_differ_in_a_learnable_way():
    from course_utils.rewards import is_well_formatted
    rows = data.load_jsonl("preferences", "train")
    flaws = {r["flaw"] for r in rows}
    assert flaws == {"mismatch", "no_tags", "no_think", "unclosed", "answer_first"}
    for r in rows[:500]:
        assert is_well_formatted(r["chosen"]) and r["chosen"] != r["rejected"]
        # a rejected answer is badly formatted or contradicts its own reasoning
        assert not is_well_formatted(r["rejected"]) or r["flaw"] == "mismatch"


def test_mismatch_pairs_keep_the_reasoning_and_change_the_answer():
    from collections import Counter
    from course_utils.rewards import extract_answer, extract_think
    rows = data.load_jsonl("preferences", "train")
    shares = Counter(r["flaw"] for r in rows)
    for flaw, weight in data.FLAW_WEIGHTS.items():
        assert abs(shares[flaw] / len(rows) - weight) < 0.03, (flaw, shares[flaw])
    for r in [r for r in rows if r["flaw"] == "mismatch"][:500]:
        assert extract_think(r["rejected"]) == extract_think(r["chosen"])
        assert extract_answer(r["rejected"]) != extract_answer(r["chosen"])


def test_jsonl_rows_are_sorted_key_json():
    line = (data_dir() / "arithmetic_test.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert line == json.dumps(json.loads(line), ensure_ascii=False, sort_keys=True)


@pytest.mark.parametrize("name,split,error", [("nope", "train", ValueError), ("arithmetic", "dev", ValueError),
                                              ("corpus", "test", FileNotFoundError)])
def test_load_jsonl_bad_input(name, split, error):
    with pytest.raises(error):
        data.load_jsonl(name, split)


def test_missing_data_file_says_how_to_restore(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="python -m course_utils.data"):
        data.load_jsonl("arithmetic", "test")
    monkeypatch.setenv("COURSE_DATA", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="COURSE_DATA"):
        data.load_jsonl("arithmetic", "test")


def test_corpus_has_a_small_share_of_tagged_solutions_and_no_chat_markup():
    docs = [r["text"] for r in data.load_jsonl("corpus", "train")]
    tagged = [d for d in docs if "<think>" in d]
    assert 0.03 < len(tagged) / len(docs) < 0.12, len(tagged)
    strict = [d for d in tagged if "</think><answer>" in d]
    assert 0.3 < len(strict) / len(tagged) < 0.7
    assert not any("<|im_start|>" in d or "<|im_end|>" in d for d in docs)


def test_relative_folder_variables_are_taken_from_the_repository_root(tmp_path, monkeypatch):
    """Kernels run in notebooks/: COURSE_ARTIFACTS=artifacts/seeds/s7 must not mean notebooks/artifacts/seeds/s7."""
    from course_utils import paths
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "repo_root", lambda: tmp_path / "repo")
    (tmp_path / "repo" / "data").mkdir(parents=True)
    monkeypatch.setenv("COURSE_ARTIFACTS", "artifacts/seeds/s7")
    monkeypatch.setenv("COURSE_DATA", "data")
    assert paths.artifacts_root() == tmp_path / "repo" / "artifacts" / "seeds" / "s7"
    assert paths.data_dir() == tmp_path / "repo" / "data"
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path / "elsewhere"))   # an absolute one is kept as it is
    assert paths.artifacts_root() == tmp_path / "elsewhere"
    monkeypatch.delenv("COURSE_ARTIFACTS")
    assert paths.artifacts_root() == tmp_path / "repo" / "artifacts"


def test_tool_problems_sum_several_two_digit_numbers_none_twice():
    splits = {s: data.load_jsonl("tool_arithmetic", s) for s in data.SPLITS}
    assert {s: len(r) for s, r in splits.items()} == data.TOOL_SPLIT_SIZES
    lists = [{tuple(p["terms"]) for p in rows} for rows in splits.values()]
    assert sum(map(len, lists)) == sum(data.TOOL_SPLIT_SIZES.values())   # no list twice, in a split or across
    for rows in splits.values():
        assert {len(p["terms"]) for p in rows} == set(data.TOOL_TERMS)
        for p in rows:
            assert all(data.LOW <= t <= data.HIGH for t in p["terms"]) and p["answer"] == str(sum(p["terms"]))
            assert all(str(t) in p["question"] for t in p["terms"]) and "completion" not in p
    arithmetic = data.load_jsonl("arithmetic", "train")
    assert all(set(p) >= {"a", "b"} and "terms" not in p for p in arithmetic)   # the course's other sums: two operands
