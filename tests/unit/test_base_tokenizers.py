"""Base tokenizers: an unknown name lists the known ones, a missing package names the extra, and neither leaves a
half-built folder (nothing real is built here: tests/real/test_base_tokenizers.py builds them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hf_chat_templates import base_tokenizer
from hf_chat_templates.errors import MissingDependencyError, UnknownNameError


def test_unknown_base_tokenizer_lists_names() -> None:
    with pytest.raises(
        UnknownNameError, match=r"unknown base tokenizer 'llama-3'.*llama3, o200k-harmony, mistral-v3-sp"
    ):
        base_tokenizer("llama-3")


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "llama_models", None)  # import llama_models now raises ImportError
    with pytest.raises(MissingDependencyError) as err:
        base_tokenizer("llama3")
    assert "llama-models" in str(err.value)
    assert err.value.hint == "pip install 'hf-chat-templates[reference]'"
    assert not any(tmp_path.joinpath("base_tokenizers").iterdir())  # no half-built folder left
