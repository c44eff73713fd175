"""Loud skips: a broken line is a problem of that line (with its true number), never of the rest of the file nor
an abort; records that cannot be read, normalized or rendered count toward `max_skipped` (default 0), and above
it `prepare` publishes nothing and says which limit was crossed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice, prepare
from hf_chat_templates.conversations.normalize import SkipLimit
from hf_chat_templates.conversations.records import BATCH_BYTES, open_conversations, record_batches
from hf_chat_templates.errors import UsageError
from hf_chat_templates.verification.dataset import verify_conversations

from ..helpers import CONVERSATIONS, GOOD, run, write_jsonl

PLAIN = json.dumps(CONVERSATIONS[0])
# Fails on a user turn that says "boom".
BOOM = GOOD.replace(
    "{%- for m in messages -%}",
    "{%- for m in messages -%}{%- if m.content == 'boom' -%}{{- raise_exception('boom') -}}{%- endif -%}",
)


def _boom_template(tmp_path: Path) -> Path:
    template = tmp_path / "boom.jinja"
    template.write_text(BOOM)
    return template


def _with_broken_line(tmp_path: Path) -> Path:
    data = tmp_path / "c.jsonl"
    lines = [PLAIN.encode()] * 300
    lines[150] = PLAIN.replace("Hi there", "Hi \xff").encode("utf-8").replace("\xff".encode(), b"\xff")
    data.write_bytes(b"\n".join(lines) + b"\n")
    return data


def test_a_line_that_is_not_utf8_is_reported_with_its_number_and_the_rest_is_read(good: Path, tmp_path: Path) -> None:
    data = _with_broken_line(tmp_path)
    report = prepare(good, data, tmp_path / "out", max_skipped=1)
    assert (report.written, report.records, report.ok) == (299, 300, True)
    assert len(report.bad_lines) == 1 and report.bad_lines[0][0] == 151
    assert report.bad_lines[0][1].startswith("not UTF-8 at byte 47 of the line")
    checked = verify_conversations(good, data)
    assert (checked.records, checked.bad_lines[0][0], checked.bad_line_count) == (299, 151, 1)


def test_a_line_nested_100000_levels_is_a_problem_of_that_line(good: Path, tmp_path: Path) -> None:
    deep = '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    data = write_jsonl(tmp_path / "c.jsonl", [PLAIN, deep, "[" * 100_000, PLAIN])
    report = prepare(good, data, tmp_path / "out", max_skipped=2)
    assert report.written == 2
    assert report.bad_lines == [(2, "nested deeper than 200 levels"), (3, "nested deeper than 200 levels")]
    checked = verify_conversations(good, data)
    assert checked.records == 2 and [n for n, _ in checked.bad_lines] == [2, 3]


def test_a_lone_surrogate_is_a_problem_of_its_record_and_a_pair_is_its_character(good: Path, tmp_path: Path) -> None:
    """JSON's "\\ud800" escape alone decodes to a string no tokenizer encodes (tiktoken and tokenizers both raise):
    the record is named with the string's place, a JSON file's as well as a JSONL line's; an escaped pair is the
    character it stands for."""
    lone = {"messages": [{"role": "user", "content": "bad \ud800 x"}, {"role": "assistant", "content": "ok"}]}
    pair = {"messages": [{"role": "user", "content": "smile \ud83d\ude00"}, {"role": "assistant", "content": "ok"}]}
    why = "messages[0].content holds a lone surrogate (\\ud800) at character 5: not Unicode text"
    data = write_jsonl(tmp_path / "c.jsonl", [PLAIN, json.dumps(lone), json.dumps(pair)])
    report = prepare(good, data, tmp_path / "out", max_skipped=1)
    assert report.written == 2 and [n for n, _ in report.bad_lines] == [2]
    assert report.bad_lines[0][1].startswith(why), report.bad_lines
    listed = tmp_path / "c.json"
    listed.write_text(json.dumps([CONVERSATIONS[0], lone, pair]), encoding="utf-8")
    report = prepare(good, listed, tmp_path / "out-json", max_skipped=1)
    assert report.written == 2 and report.bad_lines[0][1].startswith(why), report.bad_lines
    assert not prepare(good, data, tmp_path / "refused").ok  # counted toward --max-skipped 0


def test_malformed_records_are_reported_bad_lines_in_verify(good: Path, tmp_path: Path) -> None:
    def turn(**fields: object) -> str:
        return json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", **fields}]})

    data = write_jsonl(
        tmp_path / "c.jsonl",
        [
            turn(content="ok", tool_calls=5),
            turn(tool_calls=[{"type": "function", "function": {"arguments": {}}}]),
            turn(tool_calls=[{"function": {"name": "f", "arguments": [1, 2]}}]),
            turn(content=["just text"]),
            PLAIN,
        ],
    )
    report = verify_conversations(good, data)
    assert report.records == 1
    assert report.bad_lines == [
        (1, "message 1: 'tool_calls' must be a list, not int"),
        (2, "message 1: tool call 0 has no function name"),
        (3, "message 1: tool call 0: 'arguments' must be an object or a JSON string, not list"),
        (4, "message 1: content part 0 is not an object"),
    ]
    assert report.tally.skipped["normalize"] == 4
    limited = verify_conversations(good, data, max_skipped="50%")
    assert not limited.ok and "--max-skipped 50%" in limited.over_limit


def test_by_default_one_record_that_does_not_render_publishes_nothing(good: Path, tmp_path: Path) -> None:
    boom = {"messages": [{"role": "user", "content": "boom"}, {"role": "assistant", "content": "x"}]}
    data = write_jsonl(tmp_path / "c.jsonl", [PLAIN, json.dumps(boom), PLAIN, PLAIN])
    template = _boom_template(tmp_path)
    report = prepare(good, data, tmp_path / "out", TemplateChoice(template=template))
    assert (report.written, report.encoded, report.output, report.ok) == (0, 3, "", False)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["boom.jinja", "c.jsonl"]  # no staging left behind
    assert report.unrendered == [(2, "does not render: TemplateError: boom")]
    assert "1 of 4 records could not be used (1 render), more than --max-skipped 0 allows" in report.over_limit
    assert "refused:" in report.describe() and "too many records left out" in report.describe()
    for limit in (1, "1", "25%"):
        out = tmp_path / f"out-{type(limit).__name__}-{limit}".replace("%", "pct")
        passed = prepare(good, data, out, TemplateChoice(template=template), max_skipped=limit)
        assert (passed.written, passed.ok) == (3, True) and out.is_dir()
    assert not prepare(good, data, tmp_path / "out-pct", TemplateChoice(template=template), max_skipped="20%").ok


def test_records_with_nothing_to_train_do_not_count(good: Path, tmp_path: Path) -> None:
    question = json.dumps({"messages": [{"role": "user", "content": "no answer"}]})
    report = prepare(good, write_jsonl(tmp_path / "c.jsonl", [PLAIN, question]), tmp_path / "out")
    assert (report.written, report.ok, report.over_limit) == (1, True, "")
    assert report.skipped == [(2, "no assistant turn to train")]
    assert report.tally.skipped == {
        "read": 0,
        "normalize": 0,
        "render": 0,
        "every turn left out": 0,
        "nothing to train": 1,
    }


def test_the_cli_exits_1_over_the_limit(good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [PLAIN, "oops"])
    code, out, _ = run(capsys, "prepare", str(good), "--conversations", str(data), "--output", str(tmp_path / "out"))
    assert code == 1 and "--max-skipped 0" in out and "line 2: not JSON" in out
    assert not (tmp_path / "out").exists()


def test_max_skipped_is_a_count_or_a_percentage() -> None:
    assert SkipLimit.parse(None).count == 0 and SkipLimit.parse("12").count == 12
    assert SkipLimit.parse("0.5%").percent == 0.5
    assert SkipLimit.parse("10%").crossed(11, 100) and not SkipLimit.parse("10%").crossed(10, 100)
    for wrong in ("-1", "ten", "150%"):
        with pytest.raises(UsageError, match="max_skipped"):
            SkipLimit.parse(wrong)


def test_batches_are_bounded_by_bytes_too(tmp_path: Path) -> None:
    long = json.dumps({"messages": [{"role": "user", "content": "x" * 1000}, {"role": "assistant", "content": "y"}]})
    data = write_jsonl(tmp_path / "c.jsonl", [long] * 10)
    source = open_conversations(data)
    sizes = [len(b) for b in record_batches(source, lambda *_: None, max_bytes=3000)]
    assert sizes == [3, 3, 3, 1] and BATCH_BYTES == 16 << 20
