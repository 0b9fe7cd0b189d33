"""Shared fixtures. Tests run offline (the Makefile sets HF_HUB_OFFLINE=1).

The notebooks' budget report lives in the repository's top-level ``conftest.py``, which pytest
loads for every run, the notebook-only runs of ``make test`` included.
"""
import os

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tokenizer():
    from course_utils.modeling import train_tokenizer
    return train_tokenizer()


@pytest.fixture
def tmp_artifacts(tmp_path, monkeypatch):
    """Point COURSE_ARTIFACTS at a fresh folder for one test."""
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path / "artifacts"))
    return tmp_path / "artifacts"
