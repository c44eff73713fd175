"""Hostile templates are contained: each ends as a `renders` failure naming the sandbox's refusal or the limit it
hit, within the time limit, and nothing from the environment or the file system reaches the output."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.verification.context import VerifyContext
from hf_chat_templates.verification.runner import run_checks

from ..helpers import chatml_folder

HOSTILE = Path(__file__).resolve().parent.parent / "hostile"
SECRET = "hostile-secret-8731"
EXPECTED = {
    "class_mro_subclasses": "SecurityError",
    "function_globals": "SecurityError",
    "mro_call": "SecurityError",
    "format_string_escape": "SecurityError",
    "format_map": "SecurityError",
    "namespace_underscore": "SecurityError",
    "namespace_dunder_set": "SecurityError",
    "huge_range": "OverflowError",
    "nested_loops": "time limit",
    "recursive_macro": "recursion limit",
    "output_blowup": "over the limit of 10,000,000",
    "memory_bomb": "needed more than",
    "include_file": "no loader",
    "cycler_globals": "SecurityError",
    "lipsum_globals": "SecurityError",
    "dict_global": "SecurityError",
    "dunder_method": "SecurityError",
    "undefined_names": None,  # renders: undefined names are empty, never the process environment
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(chatml_folder(tmp_path_factory.mktemp("tok") / "tok")))


def test_corpus_is_complete() -> None:
    assert {p.stem for p in HOSTILE.glob("*.jinja")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_template_is_contained(name: str, tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HF_CHAT_TEMPLATES_TEST_SECRET", SECRET)
    # Only the endless loop is meant to meet the time limit; every other template must meet its own limit first,
    # however busy the machine is, so the time limit is short for that one alone.
    monkeypatch.setenv("HF_CHAT_TEMPLATES_RENDER_SECONDS", "1" if EXPECTED[name] == "time limit" else "120")
    template = (HOSTILE / f"{name}.jinja").read_text()
    plain = tuple(p for p in build_probes() if p.id == "plain")
    ctx = VerifyContext(tokenizer, template, probes=plain)
    start = time.monotonic()
    (result,) = run_checks(ctx, ["renders"])
    assert time.monotonic() - start < 150
    rendered = ctx.rendered["plain"]
    assert SECRET not in (rendered.text or "") and "root:" not in (rendered.text or "")
    if EXPECTED[name] is None:
        assert result.status == "pass"
        return
    assert result.status == "fail", rendered
    assert EXPECTED[name] in result.message, result.message
