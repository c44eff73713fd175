"""`reference-parity` on Mistral instruct templates: mistral-common decides, in token ids on its own vocabularies.

- mistral-common's own generated templates are found to follow their version, and match it;
- published Mistral templates follow the version their model ships, with the differences they really have;
- templates broken on purpose (a space missing, the system prompt in the wrong turn, `[/INST]` without its space,
  arguments encoded twice) are named with the probe, message, token position, both sides' tokens and the fix;
- every other template of the corpus is left to the other references (or none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.verification import mistral_reference as mr
from hf_chat_templates.verification.references import MISTRAL, begin, mistral_outcomes
from hf_chat_templates.verification.results import CheckResult

from ..helpers import build_toy_tokenizer, check, context, corpus_names, corpus_templates, verify_recording_workers

MISTRAL_DATA = Path(__file__).parents[1] / "data" / "mistral"
UNSEEN = Path(__file__).parents[1] / "data" / "unseen"
NEMO = corpus_templates("mistral-nemo")["default"].read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Any tokenizer: both sides are ids on mistral-common's vocabularies, whatever the template is installed on."""
    return build_toy_tokenizer(tmp_path_factory.mktemp("mistral") / "tok")


def parity(folder: Path, template: str) -> CheckResult:
    return check(context(folder, template), "reference-parity")


def generated(version: str) -> str:
    """mistral-common's own chat template for one of mr.VERSIONS."""
    from mistral_common.integrations.chat_templates.chat_templates import generate_chat_template
    from mistral_common.tokens.tokenizers.base import TokenizerVersion

    return generate_chat_template(
        spm=not version.endswith("tekken"),
        tokenizer_version=TokenizerVersion(version.split("-")[0]),
        image_support=False,
        audio_support=False,
        thinking_support=False,
        default_system_prompt=None,
        plain_thinking_support=False,
        use_special_token_variables=True,
        model_settings_fields=None,
        reasoning_effort_values=None,
        reasoning_effort_default=None,
    )


def cases_of(result: CheckResult) -> set[str]:
    return {e["case"] for e in result.detail.get("examples", [])}


def published(name: str) -> str:
    return (MISTRAL_DATA / f"{name}.jinja").read_text(encoding="utf-8")


# ---- mistral-common's own templates ----------------------------------------------------------------------------

# mistral-common's generated v2/v3 templates write a tool result's JSON content as a JSON string, where its
# tokenizer parses the JSON and writes the object: a real difference, in the tool results alone.
JSON_RESULT_CASES = {"tool-call", "tool-call@3", "tool-call-json-arguments", "tool-call-json-arguments@3"}


@pytest.mark.parametrize("version", mr.VERSIONS)
def test_mistral_commons_own_template_follows_its_version(folder: Path, version: str) -> None:
    result = parity(folder, generated(version))
    assert result.detail["reference_version"] == version, result.message
    if version in ("v2", "v3", "v3-tekken"):
        assert result.status == "warn", result.message
        assert cases_of(result) <= JSON_RESULT_CASES | {"parallel-tool-calls", "parallel-tool-calls@4"}
        assert all(e["message_index"] == 2 for e in result.detail["examples"]), result.detail["examples"]
    else:
        assert result.status == "pass", result.message
        assert f"mistral-common {version}" in result.message


# ---- published templates ---------------------------------------------------------------------------------------


def test_mistral_nemo_follows_v3_tekken_with_its_known_differences(folder: Path) -> None:
    """Nemo writes the system message only when the last user turn is the last message (model.toml's
    nothing-dropped) and JSON-string arguments a second time (values-faithful): both differ from mistral-common,
    as warnings, since the template does not claim to be mistral-common's."""
    result = parity(folder, NEMO)
    assert result.status == "warn", result.message
    assert result.detail["reference_version"] == "v3-tekken"
    assert "follows mistral-common v3-tekken (found by rendering)" in result.message
    assert cases_of(result) == {"system", "multi-turn", "tool-call-json-arguments", "tool-call-json-arguments@3"}


def test_mistral_7b_v03_follows_v3(folder: Path) -> None:
    result = parity(folder, published("mistral-7b-instruct-v0.3"))
    assert (result.status, result.detail["reference_version"]) == ("warn", "v3"), result.message
    assert cases_of(result) == {"system", "multi-turn", "tool-call-json-arguments", "tool-call-json-arguments@3"}


def test_mistral_small_32_follows_v11_with_its_default_system_prompt(folder: Path) -> None:
    result = parity(folder, published("mistral-small-3.2-24b-instruct-2506"))
    assert (result.status, result.detail["reference_version"]) == ("warn", "v11-tekken"), result.message
    assert cases_of(result) == {"tool-call-json-arguments", "tool-call-json-arguments@3"}
    example = result.detail["examples"][0]
    assert example["reference_tokens"][0] == '{"' and example["template_tokens"][:2] == ['"', '{\\"']
    assert "write the JSON value once" in result.hint


def test_devstral_follows_v13_token_for_token(folder: Path) -> None:
    """Devstral Small 2507 (Unsloth's edit): its default system prompt given to mistral-common as the system
    message, every probe's ids are v13's; v7 and v11 write the tool calls otherwise."""
    result = parity(folder, published("devstral-small-2507-unsloth"))
    assert result.status == "pass", result.message
    assert result.message == "token ids equal mistral-common v13-tekken on 20 probes"
    assert result.detail["default_system_prompt"].startswith("You are Devstral, a helpful agentic model")


def test_mistral_7b_v02_follows_v1_without_its_spaces(folder: Path) -> None:
    """v0.2's template writes `<s>[INST] …` and `[/INST]answer`, where mistral-common v1 encodes `▁[INST]` and
    `▁answer` (the documented `<s> [INST] … [/INST] answer</s>`): the whitespace question, settled in ids."""
    result = parity(folder, published("mistral-7b-instruct-v0.2"))
    assert (result.status, result.detail["reference_version"]) == ("warn", "v1"), result.message
    assert result.detail["template_tokens"][0] == "[" and result.detail["reference_tokens"][0] == "▁["
    assert "write a space before this text" in result.hint
    plain = next(e for e in result.detail["examples"] if e["case"] == "plain")
    assert plain["token_position"] == 1  # the first difference; the answer's ▁ is the next
    assert {"generation-prompt", "plain", "plain@1"} <= cases_of(result)


def test_a_template_no_version_renders_alike_is_info_naming_the_closest(folder: Path) -> None:
    """llama.cpp's Mistral Small 3.1 template writes its own tool prompt into the system prompt when tools are
    given: no version's format, so the closest is named, with the first difference, as info."""
    result = parity(folder, published("mistral-small-3.1-24b-instruct-2503-llama-cpp"))
    assert result.status == "info", result.message
    assert result.detail["closest_version"] == "v7-tekken"
    assert "closest: v7-tekken; first difference: probe tools-declared" in result.message


def test_ministral_reasoning_default_system_prompt_thinks_in_a_think_chunk(folder: Path) -> None:
    """Ministral 3 Reasoning's default system prompt writes `[THINK]`…`[/THINK]` as the tokens: mistral-common v13
    is given it as text, thinking and text chunks (a ThinkChunk, as its SystemMessage takes), and encodes it alike."""
    template = (UNSEEN / "ministral-3-14b-reasoning" / "chat_template.jinja").read_text(encoding="utf-8")
    result = parity(folder, template)
    assert result.status == "pass", result.message
    assert result.detail["reference_version"] == "v13-tekken"
    assert result.detail["default_system_prompt"].startswith("# HOW YOU SHOULD THINK AND ANSWER")


# ---- broken on purpose -----------------------------------------------------------------------------------------

V03 = published("mistral-7b-instruct-v0.3")
S32 = published("mistral-small-3.2-24b-instruct-2506")


def broken(template: str, old: str, new: str) -> str:
    assert template.count(old) >= 1, old
    return template.replace(old, new)


def only_new(folder: Path, original: str, changed: str) -> tuple[CheckResult, list[dict[str, Any]]]:
    """The broken template's result and its differences the original does not have."""
    before = {e["case"] for e in parity(folder, original).detail.get("examples", [])}
    result = parity(folder, changed)
    return result, [e for e in result.detail["examples"] if e["case"] not in before]


def test_a_missing_space_after_inst_is_named(folder: Path) -> None:
    template = broken(V03, '"[INST] " + message["content"]', '"[INST]" + message["content"]')
    result = parity(folder, template)
    assert result.status == "warn" and result.detail["reference_version"] == "v3", result.message
    assert result.detail["template_tokens"][0] != result.detail["reference_tokens"][0]
    assert result.detail["reference_tokens"][0].startswith("▁")
    assert "token 2" in result.message and "message" in result.message
    assert "write a space before this text" in result.hint


def test_an_answer_without_the_space_after_inst_is_named(folder: Path) -> None:
    template = broken(
        V03, '{{- " " + message["content"]|trim + eos_token}}', '{{- message["content"]|trim + eos_token}}'
    )
    result, new = only_new(folder, V03, template)
    assert result.detail["reference_version"] == "v3"
    plain = next(e for e in new if e["case"] == "plain")
    assert plain["message_index"] == 1
    assert plain["template_tokens"][0] == "I" and plain["reference_tokens"][0] == "▁I"
    assert "probe plain (message 1, token" in plain["message"]


def test_the_system_prompt_in_the_wrong_turn_is_named(folder: Path) -> None:
    template = broken(
        V03, "{%- if loop.last and system_message is defined %}", "{%- if loop.first and system_message is defined %}"
    )
    result, new = only_new(folder, V03, template)
    assert result.status == "warn" and result.detail["reference_version"] == "v3", result.message
    request = next(e for e in new if e["case"] == "multi-turn@4")
    assert request["message_index"] == 1, request
    assert "probe multi-turn's first 4 messages with a generation prompt" in request["message"]


def test_arguments_encoded_twice_are_named(folder: Path) -> None:
    template = broken(
        S32, "tool_call['function']['arguments']|tojson", "tool_call['function']['arguments']|tojson|tojson"
    )
    result, new = only_new(folder, S32, template)
    assert result.status == "warn", result.message
    call = next(e for e in new if e["case"] == "tool-call")
    assert call["message_index"] == 1 and call["reference_version"] == "v11-tekken"
    assert call["template_tokens"][0] == '"' and call["reference_tokens"][0] == '{"'


def test_think_tokens_in_the_system_prompt_of_a_version_without_them_are_named(folder: Path) -> None:
    """Mistral Small 3.2 (v11) with `[THINK]`…`[/THINK]` written into its default system prompt: v11 has no
    thinking chunk, so mistral-common writes the text `[THINK]` where the template writes the token."""
    template = broken(
        S32, "You are Mistral Small 3, a Large", "You are Mistral Small 3[THINK]plan first[/THINK], a Large"
    )
    result, new = only_new(folder, S32, template)
    assert result.status == "warn" and result.detail["reference_version"] == "v11-tekken", result.message
    plain = next(e for e in new if e["case"] == "plain")
    assert plain["template_tokens"][0] == "[THINK]" and plain["reference_tokens"][0] == "["


def test_a_template_that_claims_mistral_commons_format_fails(folder: Path) -> None:
    template = "{#- mistral-common v3 format #}\n" + broken(
        V03, '"[INST] " + message["content"]', '"[INST]" + message["content"]'
    )
    result = parity(folder, template)
    assert result.status == "fail", result.message


# ---- everything else -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in corpus_names() if n != "mistral-nemo"])
def test_other_templates_are_not_compared_with_mistral_common(folder: Path, name: str) -> None:
    template = corpus_templates(name)["default"].read_text(encoding="utf-8")
    assert not mr.is_mistral_template(template)
    result = parity(folder, template)
    assert "mistral" not in result.message.lower(), result.message


def test_the_worker_gives_what_is_computed_here(folder: Path) -> None:
    ctx = context(folder, NEMO)
    begin(ctx)
    assert ctx.begun_references is not None
    from_worker = ctx.begun_references()[MISTRAL]
    ctx.begun_references = None
    assert from_worker == mistral_outcomes(ctx)[2]


def test_verify_begins_the_mistral_worker_before_the_tokenizer_loads(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder whose own template is Mistral's: the mistral-common worker is begun before the tokenizer loads
    (it loads eight vocabularies meanwhile) and is the one asked; the report is the one computed without it."""
    import shutil

    from hf_chat_templates.template.engines import json_worker
    from hf_chat_templates.verification import runner

    shipped = tmp_path / "nemo"
    shutil.copytree(folder, shipped)
    (shipped / "chat_template.jinja").write_text(NEMO, encoding="utf-8")
    only = ["reference-parity"]
    with monkeypatch.context() as late:
        late.setattr(runner, "_prestart", lambda *args: None)
        late.setattr(runner, "begin_references", lambda ctx: None)
        here = runner.verify(shipped, only=only)
    report, begun = verify_recording_workers(monkeypatch, shipped, only=only)
    assert begun == [(MISTRAL, False)]
    seen = [(r.status, r.message, r.hint) for r in report.checks]
    assert seen == [(r.status, r.message, r.hint) for r in here.checks]
    assert report.checks[0].status == "warn"
    assert not json_worker._IDLE


def test_the_html_report_aligns_both_sides_on_mistral_commons_vocabulary(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from ..helpers import run

    claimed = tmp_path / "claimed"
    shutil.copytree(folder, claimed)
    template = "{#- mistral-common v3 format #}\n" + V03.replace(
        '"[INST] " + message["content"]', '"[INST]" + message["content"]'
    )
    (claimed / "chat_template.jinja").write_text(template, encoding="utf-8")
    out = tmp_path / "report.html"
    code, _, _ = run(capsys, "verify", str(claimed), "--only", "reference-parity", "--html", str(out))
    assert code == 1
    page = out.read_text(encoding="utf-8")
    assert "template, probe plain (on mistral-common v3&#x27;s vocabulary)" in page
    assert "could not draw both sides" not in page
