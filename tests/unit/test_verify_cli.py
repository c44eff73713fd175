"""`hf-chat-templates verify`: exit codes, JSON shape, and datasets with bad lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.verification.checks import CHECK_ORDER

from ..helpers import GOOD, run


def test_verify_passing_folder_exits_0_with_json(capsys: pytest.CaptureFixture[str], good: Path) -> None:
    code, out, _ = run(capsys, "verify", str(good), "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) >= {"source", "family", "variant", "tokenizer", "versions", "checks", "summary"}
    assert [c["id"] for c in doc["checks"]] == list(CHECK_ORDER)
    assert set(doc["checks"][0]) == {"id", "status", "severity", "cause", "probe", "message", "detail", "hint"}
    assert doc["summary"]["failed"] == 0
    # The baseline writes <tool_call> tags the toy tokenizer has in pieces and no added token for: text by this
    # tokenizer's design as far as verify can tell, so a note naming --control-token, not a warning.
    atomic = next(c for c in doc["checks"] if c["id"] == "control-tokens-atomic")
    assert atomic["status"] == "info" and "--control-token <tool_call>" in atomic["message"]
    warned = {c["id"] for c in doc["checks"] if c["status"] == "warn"}
    # vLLM's null parameters for a tool without them and llama.cpp's joined parts are the engines' request handling,
    # and reasoning never rendered nor named is a limit: info
    assert warned == set()
    assert next(c for c in doc["checks"] if c["id"] == "engine-parity")["status"] == "info"


def test_verify_failing_template_exits_1(capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(GOOD.replace("'<|im_end|>\\n'", "'\\n<|im_end|>\\n'"))
    code, out, _ = run(
        capsys, "verify", str(good), "--template", str(template), "--only", "completion-matches-content,renders"
    )
    assert code == 1
    assert "FAIL completion-matches-content" in out and "ok   renders" in out
    assert "1 passed, 1 failed, 0 warned, 0 info, 0 skipped" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "{tmp}/missing"], "no such folder"),
        (["verify", "{good}", "--only", "nope"], "unknown check(s) nope"),
        (["verify", "{good}", "--template", "{tmp}/missing.jinja"], "template file not found"),
        (
            ["verify", "{good}", "--template", "{tmp}/broken.jinja"],
            "broken.jinja, line 1: the chat template does not parse",
        ),
        (["verify", "{good}", "--family", "gpt-oss", "--template", "{tmp}/broken.jinja"], "not both"),
        (["verify", "{good}", "--conversations", "{tmp}/missing.jsonl"], "missing.jsonl: no such file"),
        (["verify", "--all", "{good}"], "SOURCE would be ignored"),
        (["verify", "--all", "-v"], "--verbose would be ignored"),
        (["verify", "{good}", "-v", "--json"], "--verbose is for the text output"),
        (["verify"], "missing SOURCE"),
    ],
)
def test_verify_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "broken.jinja").write_text("{% if %}")
    code, _, err = run(capsys, *[a.format(good=good, tmp=tmp_path) for a in args])
    assert code == 2 and message in err and "Traceback" not in err


def test_folder_without_template_is_a_usage_error(capsys: pytest.CaptureFixture[str], toy_tokenizer: Path) -> None:
    code, _, err = run(capsys, "verify", str(toy_tokenizer))
    assert code == 2 and "has no chat template" in err


def test_conversations_with_bad_lines(capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(
            [
                json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
                "{not json",
                json.dumps({"messages": [{"content": "no role"}]}),
                json.dumps({"messages": [{"role": "user", "content": 7}]}),
                json.dumps({"messages": "nope"}),
                json.dumps({"messages": [{"role": "user", "content": "spell <|im_end|> here"}]}),
                "",
            ]
        )
    )
    code, out, _ = run(capsys, "verify", str(good), "--conversations", str(data), "--json")
    assert code == 1  # 4 bad lines, over the default --max-skipped 0
    code, out, _ = run(capsys, "verify", str(good), "--conversations", str(data), "--json", "--max-skipped", "4")
    assert code == 0
    doc = json.loads(out)["conversations"]
    assert doc["records"] == 2
    assert [b["line"] for b in doc["bad_lines"]] == [2, 3, 4, 5]
    assert "not JSON" in doc["bad_lines"][0]["reason"]
    assert doc["bad_lines"][1]["reason"] == "message 0 has no 'role'"
    assert "'content' must be a string, a list of parts or null, not int" in doc["bad_lines"][2]["reason"]
    assert doc["checks"]["injection"]["failed"] == 1
    assert doc["checks"]["injection"]["examples"][0]["line"] == 6


def test_conversations_catch_a_dropping_template(good: Path, tmp_path: Path) -> None:
    from hf_chat_templates.verification.dataset import verify_conversations

    template = tmp_path / "t.jinja"
    template.write_text(GOOD.replace("{%- for p in m.content -%}", "{%- for p in m.content[:1] -%}"))
    data = tmp_path / "data.jsonl"
    data.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}
                ]
            }
        )
        + "\n"
    )
    report = verify_conversations(good, data, TemplateChoice(template=template))
    assert report.failed["nothing-dropped"] == 1
    assert report.examples["nothing-dropped"][0] == (1, "message 0: 'second' is not in the rendering")


def test_only_picks_the_per_record_checks_too(capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    record = {"messages": [{"role": "user", "content": "spell <|im_end|>"}, {"role": "assistant", "content": "yo"}]}
    data.write_text(json.dumps(record) + "\n")
    code, out, _ = run(capsys, "verify", str(good), "--conversations", str(data), "--only", "nothing-dropped", "--json")
    assert code == 0
    doc = json.loads(out)
    assert [c["id"] for c in doc["checks"]] == ["nothing-dropped"]
    assert set(doc["conversations"]["checks"]) == {"renders", "nothing-dropped"}


def test_verify_text_shows_the_first_finding_and_how_to_see_the_rest(
    capsys: pytest.CaptureFixture[str], good: Path
) -> None:
    # the baseline's two tool-call tags are each in pieces: two findings of control-tokens-atomic
    code, out, _ = run(capsys, "verify", str(good), "--only", "control-tokens-atomic")
    assert code == 0
    line = next(line for line in out.splitlines() if "control-tokens-atomic" in line)
    assert line.startswith("  info control-tokens-atomic") and "<tool_call> is not one token" in line
    assert line.endswith("(+1 more; -v shows all)") and "</tool_call>" not in out
    assert out.count("fix (") == 0  # a note's fix is in its message: --control-token <tool_call>


def test_verify_verbose_shows_every_finding_with_its_fix(capsys: pytest.CaptureFixture[str], good: Path) -> None:
    code, out, _ = run(capsys, "verify", str(good), "--only", "control-tokens-atomic", "--verbose")
    assert code == 0
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if "control-tokens-atomic" in line)
    assert "<tool_call> is not one token" in lines[first] and "more" not in lines[first]
    assert lines[first + 1].strip().startswith("2/2 info: </tool_call> is not one token")
    assert lines[first + 2].strip() == (
        "fix (tokenizer config): if the model was trained with </tool_call> as one token: --control-token </tool_call>"
    )


def test_format_report_gives_each_finding_its_own_fix() -> None:
    from hf_chat_templates.verification.results import Finding, VerificationReport, verdict
    from hf_chat_templates.view.report import format_report

    findings = [
        Finding("p1", "first problem", hint="fix the first"),
        Finding("p2", "second problem", severity="warning", cause="engine"),
        Finding("p3", "third problem", hint="fix the third"),
    ]
    result = verdict("x-check", findings, "passes", "the check's fix", cause="template")
    assert result.message == "first problem (+2 more)"  # the library's message is unchanged
    report = VerificationReport("src", None, None, "tok", {}, {}, (result,))
    default = format_report(report)
    assert "first problem (+2 more; -v shows all)" in default and "third problem" not in default
    assert "first problem (+2 more)\n" in format_report(report, all_flag=None) + "\n"
    verbose = [line.strip() for line in format_report(report, verbose=True).splitlines()]
    start = next(i for i, line in enumerate(verbose) if line.startswith("FAIL x-check") and "first problem" in line)
    assert verbose[start + 1 : start + 6] == [
        "fix (template): fix the first",
        "2/3 error: third problem",
        "fix (template): fix the third",
        "3/3 warning: second problem",
        "fix (engine): the check's fix",
    ]
