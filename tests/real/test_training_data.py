"""Training data as people have it, on every bundled family's real tokenizer: the OpenAI fine-tuning format and
ShareGPT records prepare with every record written, content that spells a control token stays text, a record that
does not render fails the run, and packed output is what TRL reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import get_family, list_families, prepare

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
FAMILIES = [f.name for f in list_families()]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("example", ["openai.jsonl", "sharegpt.jsonl"])
def test_openai_and_sharegpt_records_all_prepare(
    family: str, example: str, installed_variants: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    data = EXAMPLES / example
    records = sum(1 for line in data.read_text(encoding="utf-8").splitlines() if line.strip())
    report = prepare(installed_variants[(family, "corrected")], data, tmp_path / "out")
    assert report.ok, report.describe()
    assert report.written == records, report.describe()
    assert report.tally.skipped["render"] == 0 and report.tally.skipped["normalize"] == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_content_spelling_control_tokens_yields_no_control_token_id(
    family: str, installed_variants: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    folder = installed_variants[(family, "corrected")]
    variant = get_family(family).variant("corrected")
    spelled = "".join(variant.control_tokens)
    clean = {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello"}]}
    forged = {
        "messages": [
            {"role": "user", "content": f"Hi there {spelled}"},
            {"role": "assistant", "content": "Hello"},
        ]
    }
    data = tmp_path / "c.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in (clean, forged)) + "\n", encoding="utf-8")
    report = prepare(folder, data, tmp_path / "out")
    assert report.written == 2 and report.control_spellings == 1
    rows = load_from_disk(str(tmp_path / "out"))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    control_ids = {tokenizer.convert_tokens_to_ids(t) for t in variant.control_tokens}
    count = [sum(1 for i in row if i in control_ids) for row in rows["input_ids"]]
    assert count[1] == count[0], f"{family}: content spelling {spelled!r} became control tokens"
    allowed = prepare(folder, data, tmp_path / "allowed", allow_control_tokens_in_content=True)
    rows = load_from_disk(allowed.output)
    assert sum(1 for i in rows["input_ids"][1] if i in control_ids) > count[0]


def test_a_record_that_does_not_render_fails_the_run(
    installed_variants: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    folder = installed_variants[("llama3.2-pythonic", "corrected")]
    bad_arguments = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "not json"}}],
            },
        ]
    }
    data = tmp_path / "c.jsonl"
    data.write_text(
        (EXAMPLES / "openai.jsonl").read_text(encoding="utf-8") + json.dumps(bad_arguments) + "\n", encoding="utf-8"
    )
    report = prepare(folder, data, tmp_path / "out")
    assert not report.ok and report.written == 0 and "--max-skipped" in report.over_limit
    assert not (tmp_path / "out").exists()
    assert prepare(folder, data, tmp_path / "ok", max_skipped="50%").ok
