"""The package leaves the process environment as it found it: --families is the command's state, not an
environment variable (tests/unit/test_family_folders.py), and openai-harmony's vocabulary folder is set only while
the encoding loads."""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.verification import references


def test_harmonys_vocabulary_folder_is_set_only_while_it_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[str | None] = []
    fake = types.ModuleType("openai_harmony")
    fake.HarmonyEncodingName = types.SimpleNamespace(HARMONY_GPT_OSS="gpt-oss")  # type: ignore[attr-defined]

    def load(name: Any) -> str:
        seen.append(os.environ.get(references.HARMONY_VOCABULARY_ENV))
        return "encoding"

    fake.load_harmony_encoding = load  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "openai_harmony", fake)
    monkeypatch.setattr(references, "o200k_tiktoken_file", lambda: tmp_path / "o200k_base.tiktoken")
    monkeypatch.delenv(references.HARMONY_VOCABULARY_ENV, raising=False)
    references.harmony_encoding.cache_clear()
    try:
        assert references.harmony_encoding() == "encoding"
        assert seen == [str(tmp_path)] and references.HARMONY_VOCABULARY_ENV not in os.environ
        references.harmony_encoding.cache_clear()
        monkeypatch.setenv(references.HARMONY_VOCABULARY_ENV, "/the/users/own")  # a folder the user chose wins
        assert references.harmony_encoding() == "encoding"
        assert seen[-1] == "/the/users/own" and os.environ[references.HARMONY_VOCABULARY_ENV] == "/the/users/own"
    finally:
        references.harmony_encoding.cache_clear()


# An assignment, a deletion or a mutating method of os.environ, or os.putenv/unsetenv.
WRITE = re.compile(
    r"os\.environ\[[^\]]+\]\s*=[^=]|del os\.environ|os\.environ\.(setdefault|update|pop|clear)\(|os\.(put|unset)env\("
)


def test_no_module_of_the_package_writes_the_environment() -> None:
    """Only the harmony load above sets a variable, and removes it in the same function."""
    root = Path(references.__file__).resolve().parents[1]
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if WRITE.search(line) and "[HARMONY_VOCABULARY_ENV]" not in line
    ]
    assert found == []
