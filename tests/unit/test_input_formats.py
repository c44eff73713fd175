"""Input formats and sources: OpenAI / messages and ShareGPT records (auto-detected per record), JSONL, JSON,
Parquet, a datasets folder and a Hub dataset id, each record named by its line or row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TemplateChoice, prepare
from hf_chat_templates.conversations.formats import to_conversation
from hf_chat_templates.conversations.normalize import ARGUMENTS_STEP
from hf_chat_templates.conversations.records import open_conversations
from hf_chat_templates.errors import TokenizerFolderError, UsageError
from hf_chat_templates.verification.dataset import verify_conversations

from ..helpers import CONVERSATIONS, GOOD, REPO_ROOT, write_jsonl

EXAMPLES = REPO_ROOT / "examples"
REFUSING = GOOD.replace(
    "{{- '<tool_call>' + c.function.name",
    "{%- if c.function.arguments is string -%}{{- raise_exception('arguments as a dict') -}}{%- endif -%}"
    "{{- '<tool_call>' + c.function.name",
)


def _records(path: Path, **options: Any) -> list[tuple[int, Any, str, str]]:
    return [(w, r, k, why) for w, r, k, why, _, _ in open_conversations(path, **options).records()]


def test_sharegpt_turns_map_onto_messages_with_tool_calls_and_results() -> None:
    record = json.loads((EXAMPLES / "sharegpt.jsonl").read_text(encoding="utf-8").splitlines()[1])
    conversation, problem, steps = to_conversation(record, "auto", None, "tools")
    assert problem is None and steps == ("sharegpt", "tools-json")
    assert conversation is not None
    user, call, result, answer = conversation["messages"]
    assert (user["role"], call["role"], result["role"], answer["role"]) == ("user", "assistant", "tool", "assistant")
    assert call["tool_calls"] == [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    ]
    assert result["tool_call_id"] == "call_0" and result["name"] == "get_weather"
    assert conversation["tools"][0]["function"]["name"] == "get_weather"
    system = json.loads((EXAMPLES / "sharegpt.jsonl").read_text(encoding="utf-8").splitlines()[0])
    converted, _, _ = to_conversation(system, "sharegpt", None, "tools")
    assert converted is not None and converted["messages"][0] == {"role": "system", "content": system["system"]}


def test_an_unknown_sharegpt_role_is_a_problem_of_that_record() -> None:
    record = {"conversations": [{"from": "human", "value": "hi"}, {"from": "robot", "value": "beep"}]}
    conversation, problem, _ = to_conversation(record, "auto", None, "tools")
    assert conversation is None and problem is not None and problem.startswith("turn 1: unknown role 'robot'")


def test_the_examples_prepare_every_record(good: Path, tmp_path: Path) -> None:
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING)
    openai = prepare(good, EXAMPLES / "openai.jsonl", tmp_path / "a", TemplateChoice(template=template))
    assert (openai.written, openai.records, openai.tally.steps) == (2, 2, {ARGUMENTS_STEP: 1})
    sharegpt = prepare(good, EXAMPLES / "sharegpt.jsonl", tmp_path / "b", TemplateChoice(template=template))
    assert (sharegpt.written, sharegpt.records) == (3, 3)
    assert sharegpt.tally.steps == {"sharegpt": 3, "tools-json": 1}
    assert "mapped ShareGPT turns (from/value) onto messages: 3 records" in sharegpt.describe()
    forced = prepare(good, EXAMPLES / "sharegpt.jsonl", tmp_path / "c", input_format="sharegpt")
    assert forced.written == 3
    checked = verify_conversations(good, EXAMPLES / "sharegpt.jsonl", TemplateChoice(template=template))
    assert checked.records == 3 and checked.failed["renders"] == 0


def test_messages_in_another_column(good: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps({"chat": c["messages"]}) for c in CONVERSATIONS[:2]])
    report = prepare(good, data, tmp_path / "out", input_format="messages", messages_column="chat")
    assert report.written == 2


def test_a_json_file_holds_a_list_of_records_named_by_their_lines(good: Path, tmp_path: Path) -> None:
    data = tmp_path / "c.json"
    data.write_text(json.dumps([CONVERSATIONS[0], {"messages": "x"}, CONVERSATIONS[1]], indent=1))
    found = _records(data)
    assert [w for w, *_ in found] == [2, 14, 17]
    assert found[1][2:] == ("normalize", "no 'messages' list (or it is empty)")
    report = prepare(good, data, tmp_path / "out", max_skipped=1)
    assert report.written == 2 and report.bad_lines == [(14, "no 'messages' list (or it is empty)")]
    single = tmp_path / "one.json"
    single.write_text(json.dumps(CONVERSATIONS[0]))
    assert [w for w, *_ in _records(single)] == [1]


def test_a_json_file_that_does_not_parse_is_a_usage_error_with_its_line(tmp_path: Path) -> None:
    data = tmp_path / "c.json"
    data.write_text('[\n{"messages": []},\n{oops}\n]')
    with pytest.raises(UsageError, match="not JSON") as info:
        list(open_conversations(data).records())
    assert info.value.line == 3


def test_a_json_file_of_json_lines_is_read_as_jsonl(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "c.json", [json.dumps(c) for c in CONVERSATIONS])
    assert [w for w, *_ in _records(data)] == [1, 2, 3]


def test_parquet_with_string_arguments_prepares_every_row(good: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING)
    records = [json.loads(line) for line in (EXAMPLES / "openai.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [{"messages": r["messages"], "tools": json.dumps(r.get("tools"))} for r in records]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    found = _records(tmp_path / "c.parquet")
    assert [(w, k) for w, _, k, _ in found] == [(0, ""), (1, "")]
    report = prepare(good, tmp_path / "c.parquet", tmp_path / "out", TemplateChoice(template=template))
    assert (report.written, report.records, report.unit) == (2, 2, "row")
    assert report.tally.steps[ARGUMENTS_STEP] == 1


def test_a_datasets_folder(good: Path, tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    sharegpt = [json.loads(line) for line in (EXAMPLES / "sharegpt.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [{"conversations": r["conversations"], "system": r.get("system", "")} for r in sharegpt]
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    report = prepare(good, tmp_path / "ds", tmp_path / "out")
    assert (report.written, report.records, report.unit) == (3, 3, "row")
    DatasetDict({"train": Dataset.from_list(rows), "test": Dataset.from_list(rows[:1])}).save_to_disk(
        str(tmp_path / "dd")
    )
    assert prepare(good, tmp_path / "dd", tmp_path / "out-test", split="test").written == 1
    checked = verify_conversations(good, tmp_path / "dd")
    assert checked.records == 3 and checked.unit == "row"


def test_a_hub_dataset_that_cannot_be_reached_is_a_clear_error(good: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="nor a Hub dataset") as info:
        prepare(good, "nobody/no-such-dataset", tmp_path / "out")
    assert info.value.hint and "save_to_disk" in info.value.hint
    assert not (tmp_path / "out").exists()
    with pytest.raises(TokenizerFolderError, match="no such file or folder"):
        prepare(good, tmp_path / "missing.jsonl", tmp_path / "out")
    with pytest.raises(UsageError, match="input format 'csv'"):
        prepare(good, EXAMPLES / "openai.jsonl", tmp_path / "out", input_format="csv")
