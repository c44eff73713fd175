"""Verify's severity policy on templates it was not tuned on: a template's own refusal is a stated limit (info, a
warning when the data to train on has what it refuses) and turns into no error elsewhere; every rendering of a run
sees one clock; the format's whitespace between the role header and the answer is info, whitespace between the
answer and its stop token an error."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.template.analysis import reads_content_parts
from hf_chat_templates.verification.context import VERIFY_CLOCK
from hf_chat_templates.verification.dataset import carried_fields
from hf_chat_templates.verification.runner import run_checks

from ..helpers import GOOD, REPO_ROOT, check, context

# A ChatML template without tools or content parts, which says so with raise_exception.
TOOLLESS = (
    "{%- if tools -%}{{- raise_exception('This model does not support tools.') -}}{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.content is not string -%}{{- raise_exception('Only string content is supported.') -}}{%- endif -%}"
    "{%- if m.tool_calls -%}{{- raise_exception('Tool calls are not supported.') -}}{%- endif -%}"
    "{%- if m.role == 'tool' -%}{{- raise_exception('Tool messages are not supported.') -}}{%- endif -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# The baseline, refusing several tool calls in one turn (Llama 3.x: "This model only supports single tool-calls").
SINGLE_CALL = GOOD.replace(
    "{%- for c in m.tool_calls or [] -%}",
    "{%- if (m.tool_calls or []) | length > 1 -%}{{- raise_exception('This model only supports single tool-calls "
    "at once!') -}}{%- endif -%}{%- for c in m.tool_calls or [] -%}",
)


def failing(ctx: Any) -> dict[str, str]:
    return {r.id: r.message for r in run_checks(ctx) if r.status == "fail"}


# ---- a refusal is a stated limit ---------------------------------------------------------------------------------


def test_a_template_that_refuses_tools_and_parts_states_a_limit_and_no_check_fails(good: Path) -> None:
    ctx = context(good, TOOLLESS)
    assert failing(ctx) == {}  # nothing cascades: nothing-dropped, values-faithful, the mask, engine-parity
    result = check(ctx, "renders")
    assert result.status == "info" and result.probe == "tools-declared"
    assert result.message.startswith(
        "probe tools-declared (tools declared, none called): the template refuses tool definitions "
        "(raise_exception: This model does not support tools.): it does not support tool calling"
    )
    messages = [e["message"] for e in result.detail["examples"]]
    assert any("refuses content given as a list of parts (raise_exception: Only string content" in m for m in messages)
    assert "convert such inputs before rendering" in (result.hint or "")


def test_a_refusal_is_a_warning_when_the_data_to_train_on_has_what_it_refuses(good: Path) -> None:
    with_tools = check(context(good, TOOLLESS, training=True, data_fields={"tools": 3}), "renders")
    assert with_tools.status == "warn" and with_tools.probe == "tools-declared"
    assert "the data to train on has it: its records that carry it cannot be rendered" in with_tools.message
    without = check(context(good, TOOLLESS, training=True, data_fields={"system": 3}), "renders")
    assert without.status == "info"  # the data has none of what the template refuses
    unknown = check(context(good, TOOLLESS, training=True), "renders")
    assert unknown.status == "warn" and "the template is to be trained on" in unknown.message


def test_verify_conversations_decides_whether_a_refusal_is_a_warning(
    capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path
) -> None:
    from ..helpers import run, write_jsonl

    template = tmp_path / "toolless.jinja"
    template.write_text(TOOLLESS)
    plain = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    data = write_jsonl(tmp_path / "plain.jsonl", [json.dumps(plain)])
    args = ("verify", str(good), "--template", str(template), "--only", "renders", "--json")
    code, out, _ = run(capsys, *args, "--training", "--conversations", str(data))
    (result,) = json.loads(out)["checks"]
    assert code == 0 and result["severity"] == "info"  # the data has no tools: the limit loses nothing
    assert "it does not support tool calling" in result["message"]
    tools = {**plain, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    data = write_jsonl(tmp_path / "tools.jsonl", [json.dumps(tools)])
    code, out, _ = run(capsys, *args, "--training", "--conversations", str(data))
    (result,) = json.loads(out)["checks"]
    assert result["severity"] == "warning" and "the data to train on has it" in result["message"]


def test_a_template_that_refuses_parallel_calls_names_that_capability(good: Path) -> None:
    ctx = context(good, SINGLE_CALL)
    result = check(ctx, "renders")
    assert result.status == "info" and result.probe == "parallel-tool-calls"
    assert "the template refuses parallel tool calls (several in one turn) (raise_exception: This model only " in (
        result.message
    )
    assert result.detail["lacks"] == ["parallel_calls"]
    assert check(ctx, "nothing-dropped").status != "fail"
    parallel = check(context(good, SINGLE_CALL, training=True, data_fields={"parallel_calls": 1}), "renders")
    assert parallel.status == "warn"


def test_the_data_fields_count_content_parts_and_parallel_calls() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": {}}}
    record = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [call, call]},
        ]
    }
    assert carried_fields(record) == {"content_parts", "tool_calls", "parallel_calls"}


# Plain ChatML as many models ship it (OpenHermes 2.5, Qwen1.5): every message's content concatenated as a string,
# every role written the same way; no tools, no content parts.
PLAIN_CHATML = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_crash_on_what_the_template_never_reads_is_a_limit_of_its_format(good: Path) -> None:
    ctx = context(good, PLAIN_CHATML)
    assert failing(ctx) == {}
    result = check(ctx, "renders")
    assert result.status == "info" and result.probe == "tool-call"
    assert "the template never reads tool calls and raises on them (UndefinedError: " in result.message
    messages = [e["message"] for e in result.detail["examples"]]
    assert any(
        "never reads content given as a list of parts and raises on them (TypeError: can only concatenate str" in m
        for m in messages
    )
    # It shows a tool message as it shows any message: tool calls never rendered are not an error for that
    dropped = check(ctx, "nothing-dropped")
    assert dropped.status == "info" and "although the template renders their results" not in json.dumps(dropped.detail)
    assert "the template has no tool-call support" in json.dumps(dropped.detail)
    trained = check(context(good, PLAIN_CHATML, training=True, data_fields={"content_parts": 2}), "renders")
    assert trained.status == "warn" and trained.probe == "content-parts"


# String content only, as Nemotron Nano 2 ships it: `.replace` on every content, `is string` asked of tool-call
# arguments (never of content), no loop over content. A list of parts raises UndefinedError.
STRING_ONLY = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '').replace('/think', '') -}}"
    "{%- for c in m.tool_calls or [] -%}{{- '<tool_call>' + c.function.name + ' ' + (c.function.arguments "
    "if c.function.arguments is string else c.function.arguments | tojson) + '</tool_call>' -}}{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_crash_on_parts_a_string_only_template_never_reads_is_a_stated_limit(good: Path) -> None:
    result = check(context(good, STRING_ONLY), "renders")
    assert result.status == "info" and result.probe == "content-parts", result.message
    assert "the template never reads content given as a list of parts and raises on them (UndefinedError: " in (
        result.message
    )
    assert "it takes string content only, and llama.cpp and vLLM join a message's text parts into one string" in (
        result.message
    )
    assert result.hint is not None and result.hint.startswith("pass content as one string in training")
    assert {f.severity for f in result.findings} == {"info"}


# Reads the user's parts, concatenates every other content as a string (LFM2's shape): parts it claims to take
# crash for the system message
PARTS_FOR_USERS = STRING_ONLY.replace(
    "(m.content or '').replace('/think', '')",
    "(m.content or '' if m.role != 'user' or m.content is string else m.content | map(attribute='text') | join(''))",
)
# Asks whether content is a string, and still concatenates a list
ASKS_THE_TYPE = STRING_ONLY.replace(
    "(m.content or '').replace('/think', '')", "(m.content or '' if m.content is string else m.content + '')"
)


@pytest.mark.parametrize(
    ("template", "reads"),
    [
        ("{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}", True),
        ("{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }}{% endif %}{% endfor %}", True),
        (
            "{% for m in messages %}{% set c = m.content | default('') %}{% set d = c %}{{ d is mapping }}{% endfor %}",
            True,
        ),
        ("{{ messages[0].content[0]['text'] }}", True),
        ("{{ messages[0].content | map(attribute='text') | join }}", True),
        # `is string` asked of arguments, `type` read of a tool call: nothing about content
        (
            "{% for m in messages %}{{ m.content }}{% for c in m.tool_calls %}{{ c['type'] }}"
            "{{ c.function.arguments is string }}{% endfor %}{% endfor %}",
            False,
        ),
        ("{% for m in messages %}{{ m.content.replace('a', 'b') }}{% endfor %}", False),
    ],
)
def test_a_template_reads_content_parts_when_it_loops_asks_the_type_or_reads_a_text(template: str, reads: bool) -> None:
    assert reads_content_parts(template) is reads


@pytest.mark.parametrize("template", [PARTS_FOR_USERS, ASKS_THE_TYPE], ids=["parts-for-users", "asks-the-type"])
def test_a_crash_on_parts_a_template_reads_stays_an_error(good: Path, template: str) -> None:
    result = check(context(good, template), "renders")
    assert result.status == "fail", result.message
    system = next(f for f in result.findings if f.probe == "parts-system")
    assert system.severity == "error" and "does not render in transformers' sandbox" in system.text


def test_a_crash_that_joined_parts_do_not_cure_stays_an_error(good: Path) -> None:
    # the template concatenates content and arguments: with the parts joined, the dict arguments still raise
    concatenates = STRING_ONLY.replace(
        "(c.function.arguments if c.function.arguments is string else c.function.arguments | tojson)",
        "c.function.arguments",
    ).replace("(m.content or '').replace('/think', '')", "(m.content or '')")
    result = check(context(good, concatenates), "renders")
    parts = next(f for f in result.findings if f.probe == "agent-call-with-content-parts")
    assert parts.severity == "error" and "does not render in transformers' sandbox" in parts.text
    assert next(f for f in result.findings if f.probe == "content-parts").severity == "info"


def test_a_crash_on_what_the_template_reads_stays_an_error(good: Path) -> None:
    crashing = GOOD.replace("{{- p.text -}}", "{{- p.text + 1 -}}")
    result = check(context(good, crashing), "renders")
    assert result.status == "fail" and result.probe == "content-parts"
    assert "does not render in transformers' sandbox: TypeError" in result.message


def test_the_bundled_baseline_and_a_plain_template_stay_silent(good: Path) -> None:
    assert check(context(good), "renders").status == "pass"


# ---- one clock for the whole run ---------------------------------------------------------------------------------

TIMED = "{{- '<|im_start|>system\\nTime: ' + strftime_now('%H:%M:%S') + '<|im_end|>\\n' -}}" + GOOD


@pytest.fixture
def ticking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock a second later at every reading: renderings a second apart, as on a slow machine."""
    from transformers.utils import chat_template_utils

    state = {"now": dt.datetime(2026, 5, 4, 3, 2, 1)}

    class Ticking(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> dt.datetime:  # type: ignore[override]
            state["now"] += dt.timedelta(seconds=1)
            return state["now"]

    monkeypatch.setattr(chat_template_utils, "datetime", Ticking)


@pytest.mark.usefixtures("ticking")
def test_a_template_that_prints_the_time_fails_deterministic_alone(good: Path) -> None:
    ctx = context(good, TIMED)
    assert failing(ctx).keys() == {"deterministic"}  # not ids-match-string, assistant-mask, prefix-stable, ...
    assert f"Time: {VERIFY_CLOCK:%H:%M:%S}" in (ctx.rendered["plain"].text or "")
    assert "no kwarg pins it" in check(ctx, "deterministic").message


LLAMA_33 = (REPO_ROOT / "tests" / "data" / "templates" / "llama-3.3" / "chat_template.jinja").read_text()
# Llama 3.1 and 3.2 as published: Llama 3.3's template, whose date reads the clock unless date_string is given
LLAMA_32 = LLAMA_33.replace(
    '{%- if not date_string is defined %}\n    {%- set date_string = "26 Jul 2024" %}\n{%- endif %}',
    "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n"
    '        {%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n'
    '        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}',
)


def test_llama_3_2s_date_is_a_warning_naming_date_string(good: Path, ticking: None) -> None:
    assert LLAMA_32 != LLAMA_33
    ctx = context(good, LLAMA_32)
    result = check(ctx, "deterministic")
    assert result.status == "warn" and result.detail["pinned_by"] == "date_string"
    assert "the template's date_string kwarg pins it: pass date_string in training and serving alike" in (
        result.message
    )
    assert "date_string='26 Jul 2024'" in (result.hint or "")
    assert f"Today Date: {VERIFY_CLOCK:%d %b %Y}" in (ctx.rendered["plain"].text or "")
    assert check(context(good, LLAMA_33), "deterministic").status == "pass"


# ---- whitespace that is the format ----------------------------------------------------------------------------------

# `[/INST]` then ` answer` (Mistral 7B Instruct v0.2's template), `ASSISTANT:` then ` answer` (Vicuna's)
SPACED_HEADER = GOOD.replace("'<|im_start|>' + m.role + '\\n'", "'<|im_start|>' + m.role + '\\n '")
VICUNA = (
    "{{- bos_token -}}{%- for m in messages -%}{%- if m.role == 'user' -%}{{- 'USER: ' + m.content + ' ' -}}"
    "{%- elif m.role == 'assistant' -%}{{- 'ASSISTANT: ' + m.content + eos_token -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}"
)
MISTRAL = (
    "{{- bos_token -}}{%- for m in messages -%}{%- if m.role == 'user' -%}{{- ' [INST] ' + m.content + ' [/INST]' -}}"
    "{%- elif m.role == 'assistant' -%}{{- ' ' + m.content + eos_token -}}{%- endif -%}{%- endfor -%}"
)


@pytest.mark.parametrize("template", [SPACED_HEADER, VICUNA, MISTRAL], ids=["chatml-spaced", "vicuna", "mistral"])
def test_a_space_after_the_role_header_is_info_the_model_generates_it(good: Path, template: str) -> None:
    result = check(context(good, template), "completion-matches-content")
    assert result.status == "info", result.message
    assert "the trained answer starts with '·', which the generation prompt" in result.message
    assert "the model generates a leading space before each answer; serving should strip it" in result.message
    assert "strip the leading whitespace from generated replies when serving" in (result.hint or "")


def test_a_space_between_the_answer_and_its_stop_token_is_an_error(good: Path) -> None:
    for template, extra in (
        (GOOD.replace("'<|im_end|>\\n'", "' <|im_end|>\\n'"), " "),
        (GOOD.replace("'<|im_end|>\\n'", "'\\n' + '<|im_end|>'"), "\n"),
        (MISTRAL.replace("' ' + m.content + eos_token", "' ' + m.content + ' ' + eos_token"), " "),
    ):
        result = check(context(good, template), "completion-matches-content")
        assert result.status == "fail", result.message
        assert f"after the content comes {extra!r} before the stop token" in result.message
    # The newline after ChatML's stop token is the turn's end, not the answer's
    assert check(context(good), "completion-matches-content").status == "pass"


def test_a_space_only_some_answers_get_is_an_error(good: Path) -> None:
    some = GOOD.replace(
        "{%- if m.content is string -%}{{- m.content -}}",
        "{%- if m.content is string -%}{{- (' ' if m.content[:1].isupper() else '') + m.content -}}",
    )
    result = check(context(good, some), "completion-matches-content")
    assert result.status == "fail" and "other answers do not; the model is trained on it" in result.message


# Mistral 7B Instruct v0.1's template as published: the answer follows [/INST] with no space of its own.
MISTRAL_V01 = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)


def sentencepiece_folder(root: Path) -> Path:
    """A Metaspace BPE that writes '▁' before every segment (after each control token too) and decodes it back as
    a space, with Mistral's [INST] and [/INST] as special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Replace("\u2581", " ")
    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    text = "Hello, how are you? I am fine, thank you. Something qz0123456789 content. A long message summary fox.\n"
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials)
    tok.train_from_iterator([text * 20], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(root))
    (root / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return root


def test_sentencepieces_word_start_on_the_first_answer_token_is_info(tmp_path: Path) -> None:
    from hf_chat_templates.conversations.suite import build_probes

    probes = tuple(p for p in build_probes() if p.id in ("plain", "empty-content"))
    ctx = context(sentencepiece_folder(tmp_path / "sp"), MISTRAL_V01, probes=probes)
    plain = ctx.probe("plain")
    prompt = ctx.renderer.encode(ctx.snapshot(plain, 1).text or "")
    first = ctx.tokenizer.convert_ids_to_tokens(ctx.probe_token_ids(plain)[len(prompt) : len(prompt) + 1])
    assert first[0].startswith("\u2581")  # `[/INST]I am` trains `▁I`: the model writes a space first
    result = check(ctx, "completion-matches-content")
    assert result.status == "info", result.message
    assert "the trained answer starts with '\u2581'" in result.message


# ---- the checks reference -------------------------------------------------------------------------------------------

CHECKS_DOC = REPO_ROOT / "docs" / "checks.md"


def test_every_check_is_documented_and_every_documented_check_exists() -> None:
    from hf_chat_templates.verification.checks import CHECK_ORDER

    text = CHECKS_DOC.read_text(encoding="utf-8")
    documented = [line[4:].strip() for line in text.splitlines() if line.startswith("### ")]
    assert sorted(documented) == sorted(CHECK_ORDER), set(documented) ^ set(CHECK_ORDER)
    assert documented == list(CHECK_ORDER)  # in the order they run
    sections = text.split("\n### ")[1:]
    for section in sections:
        name = section.splitlines()[0]
        assert "Example:" in section and "Fix:" in section, f"{name}: its example finding or its fix is missing"
    policy = text.split("## The checks")[0]
    for severity in ("**error**", "**warning**", "**info**"):
        assert severity in policy


def test_granite_3_3s_reasoning_inside_content_is_a_warning_by_design(good: Path) -> None:
    granite = (REPO_ROOT / "tests" / "data" / "templates" / "granite-3.3" / "chat_template.jinja").read_text()
    result = check(context(good, granite), "nothing-dropped")
    (reasoning,) = [e for e in result.detail["examples"] if "reasoning (reasoning_content)" in e["message"]]
    assert reasoning["severity"] == "warning"
    assert "the format keeps reasoning inside content by design (<think>…</think>" in reasoning["message"]


def test_a_template_with_a_tool_format_of_its_own_that_ignores_the_tools_given_drops_them(good: Path) -> None:
    # FireFunction's way: the tool list comes from a `functions` kwarg, and the conversation's `tools` are never
    # written: tool support it has, applied to other input, is data lost (a warning), not a limit of its format.
    own_format = (
        "{%- if functions is defined -%}{{- '<|im_start|>functions\\n' + functions + '<|im_end|>\\n' -}}{%- endif -%}"
        + PLAIN_CHATML
    )
    dropped = check(context(good, own_format), "nothing-dropped")
    assert dropped.status == "warn"
    assert "tool definitions are never rendered" in dropped.message
    assert "has no tool support" not in json.dumps(dropped.detail)
    plain = check(context(good, PLAIN_CHATML), "nothing-dropped")
    assert "the template has no tool support" in json.dumps(plain.detail)


# ---- text the format has the model generate -----------------------------------------------------------------------

# Functionary's way: the generation prompt ends `>>>`, the model writes the recipient, `all\n` before an answer and
# the tool's name before a call.
RECIPIENT = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.role == 'assistant' -%}"
    "{%- if m.content -%}{{- '>>>all\\n' + m.content -}}{%- endif -%}"
    "{%- for c in m.tool_calls or [] -%}{{- '>>>' + c.function.name + '\\n' + (c.function.arguments if "
    "c.function.arguments is string else c.function.arguments | tojson) -}}{%- endfor -%}"
    "{%- else -%}{{- m.content -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n>>>' -}}{%- endif -%}"
)


def test_a_prefix_the_format_has_the_model_generate_is_info_naming_it(good: Path) -> None:
    result = check(context(good, RECIPIENT), "completion-matches-content")
    assert result.status == "info", result.message
    assert "the trained answer starts with 'all\\n', which the template writes from a constant" in result.message
    assert "where a tool call writes its own text instead: the format's own prefix" in result.message
    assert result.detail["prefix"] == "all\n"
    assert "parse the format's prefix off generated replies" in (result.hint or "")


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        # the same text before a tool call too: the generation prompt could hold it
        ("'>>>' + c.function.name", "'>>>all\\n' + c.function.name", "is not the content"),
        # another text before later answers: not the format's constant
        ("'>>>all\\n' + m.content", "'>>>' + ('all' if loop.index0 < 2 else 'you') + '\\n' + m.content", "not the"),
        # built from the message (its name, else a default): no literal of the template writes it
        ("'>>>all\\n' + m.content", "'>>>' + (m.name or 'all') + '\\n' + m.content", "is not the content"),
        # text between the answer and the stop token stays the model's to learn
        ("'<|im_end|>\\n'", "'\\n<|im_end|>\\n'", "after the content comes '\\n' before the stop token"),
    ],
    ids=["every-turn", "differs-between-turns", "from-data", "before-the-stop"],
)
def test_a_prefix_that_is_not_the_formats_stays_an_error(good: Path, old: str, new: str, why: str) -> None:
    assert old in RECIPIENT
    template = RECIPIENT.replace(old, new)
    result = check(context(good, template), "completion-matches-content")
    assert result.status == "fail", result.message
    assert why in result.message
