"""A history that renders otherwise as the conversation grows is the format's own where the official renderer
does the same: Mistral's formats write `[AVAILABLE_TOOLS]` before the last user message, and so does mistral-common.

- Mistral Small 3.2 (v11) and llama.cpp's Mistral Small 3.1 (closest: v7-tekken): `prefix-stable` and
  `assistant-mask` say so as info, naming mistral-common and per-turn training;
- a template that also rewrites the history elsewhere keeps its warning, and mistral-common is not named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_chat_templates.verification.results import CheckResult

from ..helpers import build_toy_tokenizer, check, context

MISTRAL_DATA = Path(__file__).parents[1] / "data" / "mistral"
S32 = (MISTRAL_DATA / "mistral-small-3.2-24b-instruct-2506.jinja").read_text(encoding="utf-8")
S31 = (MISTRAL_DATA / "mistral-small-3.1-24b-instruct-2503-llama-cpp.jinja").read_text(encoding="utf-8")
FORMAT = "the format itself: mistral-common {} writes [AVAILABLE_TOOLS] before the last user message, as the template"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_toy_tokenizer(tmp_path_factory.mktemp("history") / "tok")


def both(folder: Path, template: str) -> tuple[CheckResult, CheckResult]:
    ctx = context(folder, template)
    return check(ctx, "prefix-stable"), check(ctx, "assistant-mask")


def history_examples(result: CheckResult) -> list[dict]:
    """The result's findings on probe agent-call-history, as {"message", "severity"}."""
    return [{"message": f.text, "severity": f.severity} for f in result.findings if f.probe == "agent-call-history"]


@pytest.mark.parametrize(("template", "version"), [(S32, "v11-tekken"), (S31, "v7-tekken (the closest version)")])
def test_tools_before_the_last_user_message_is_the_formats_own(folder: Path, template: str, version: str) -> None:
    stable, mask = both(folder, template)
    history = history_examples(stable)
    assert history and all(e["severity"] == "info" for e in history), stable.message
    assert FORMAT.format(version) in history[0]["message"]
    assert "prepare --per-turn" in history[0]["message"]
    assert "renders differently once the conversation goes past it" in history[0]["message"]
    untrained = [e for e in history_examples(mask) if "is not trained" in e["message"]]
    assert untrained and all(e["severity"] == "info" for e in untrained), mask.message
    assert FORMAT.format(version) in untrained[0]["message"]


def test_a_history_rewritten_elsewhere_keeps_its_warning(folder: Path) -> None:
    """The last user message written with a prefix it loses once another follows: mistral-common writes the user
    message the same wherever it stands, so the template's own instability is reported as before."""
    changed = S32.replace("{{- '[INST]' }}", "{{- '[INST]' + ('Now: ' if message == user_messages[-1] else '') }}")
    assert changed != S32
    stable, mask = both(folder, changed)
    assert stable.status == "warn", stable.message
    history = history_examples(stable)
    assert history and history[0]["severity"] == "warning"
    assert "message 1 (user) renders differently once the conversation goes past it" in history[0]["message"]
    assert "mistral-common" not in history[0]["message"]
    assert "--per-turn" in history[0]["message"]
    untrained = [e for e in history_examples(mask) if "is not trained" in e["message"]]
    assert untrained and all(e["severity"] != "info" for e in untrained), mask.message
    assert "mistral-common" not in untrained[0]["message"]
