"""Engine profiles: the TGI profile (minijinja as TGI configures it), the registry and `--engines`.

Each broken construct fails `engine-parity` in TGI with the engine, the construct and its rewrite named; the
baseline and TGI's own documented `tojson` escaping give no error.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hf_chat_templates import get_family
from hf_chat_templates.conversations.probes import Probe
from hf_chat_templates.errors import UsageError
from hf_chat_templates.template.engines import ENGINES, RenderJob, engine_names, engine_profiles
from hf_chat_templates.template.engines.constructs import Blame, blame_difference, blame_error
from hf_chat_templates.template.engines.llamacpp import gpt_oss_messages
from hf_chat_templates.template.engines.minijinja_tgi import TgiEngine
from hf_chat_templates.template.engines.registry import MissingProfile
from hf_chat_templates.template.rendering import Rendered
from hf_chat_templates.verification.checks import engines as engine_check
from hf_chat_templates.view.report import _failure_sides

from ..helpers import GOOD, check, context, run

CLOCK = datetime.datetime(2024, 1, 2, 3, 4, 5)
USER = [{"role": "user", "content": "Hi <b> & 'you'"}]


def _tgi(template: str, messages: list[dict] | None = None, tools: list[dict] | None = None) -> str | None:
    (out,) = TgiEngine().render_all(
        template, [RenderJob(messages or USER, tools, True, {"bos_token": "<s>"})], clock=CLOCK
    )
    return out.text if out.ok else f"ERROR {out.error}"


def test_tgi_is_minijinja_as_tgi_configures_it() -> None:
    # no trim_blocks / lstrip_blocks: the newline after a block tag and the indentation before it stay
    assert _tgi("{% if true %}\n  x{% endif %}") == "\n  x"
    # native tojson: HTML-safe escapes, no ensure_ascii argument
    assert _tgi("{{ messages[0].content | tojson }}") == '"Hi \\u003cb\\u003e \\u0026 \\u0027you\\u0027"'
    assert "unknown keyword argument 'ensure_ascii'" in str(_tgi("{{ 'é' | tojson(ensure_ascii=False) }}"))
    # pycompat string methods, raise_exception, strftime_now at the given clock, the variables passed
    assert _tgi("{{ '  a '.strip() }}{{ 'ab'.startswith('a') }}") == "aTrue"
    assert _tgi("{{ strftime_now('%Y-%m-%d') }}|{{ bos_token }}|{{ add_generation_prompt }}") == "2024-01-02|<s>|True"
    (refused,) = TgiEngine().render_all("{{ raise_exception('no tools') }}", [RenderJob(USER, None, True)], clock=CLOCK)
    assert refused.refused and refused.error == "raise_exception: no tools"


def test_tgi_reports_a_template_that_does_not_parse_for_every_job() -> None:
    outs = TgiEngine().render_all("{% if %}", [RenderJob(USER, None, True)] * 2, clock=CLOCK)
    assert [o.ok for o in outs] == [False, False] and "syntax error" in str(outs[0].error)


def test_the_registry_lists_the_engines_in_order_and_refuses_unknown_names() -> None:
    assert ENGINES == ("transformers", "llama.cpp", "tgi", "transformers.js", "vllm", "ollama")
    assert engine_names(None) == ENGINES[1:-1]  # ollama: only with a Go template to compare
    assert engine_names("tgi, llama.cpp") == ("llama.cpp", "tgi")  # ENGINES order, whatever the order given
    assert engine_names(["transformers", "tgi"]) == ("tgi",)  # the reference is always compared with
    assert [e.name for e in engine_profiles("tgi")] == ["tgi"]
    assert engine_profiles("tgi")[0] is engine_profiles(["tgi"])[0]  # made once per process
    with pytest.raises(UsageError, match=r"unknown engine\(s\) tgl, olama; engines: transformers, llama\.cpp, tgi"):
        engine_names("tgl,olama")
    with pytest.raises(UsageError, match="no engine named"):
        engine_names(" , ")


def test_an_unknown_engine_fails_before_the_tokenizer_loads(good: Path) -> None:
    with pytest.raises(UsageError, match="unknown engine"):
        context(good, engines="llama.cpp,nope")


def test_cli_engines_unknown_name_exits_2_without_traceback(capsys: pytest.CaptureFixture[str], good: Path) -> None:
    code, out, err = run(capsys, "verify", str(good), "--engines", "tgi,vlm")
    assert code == 2
    assert "unknown engine(s) vlm; engines: transformers, llama.cpp, tgi, transformers.js, vllm" in err
    assert "Traceback" not in err + out


def test_cli_engines_picks_the_profiles(capsys: pytest.CaptureFixture[str], good: Path) -> None:
    code, out, _ = run(capsys, "verify", str(good), "--engines", "tgi", "--only", "engine-parity", "--json")
    assert code == 0
    result = json.loads(out)["checks"][0]
    assert result["status"] == "pass" and list(result["detail"]["engines"]) == ["tgi"]
    tgi = result["detail"]["engines"]["tgi"]
    assert tgi["status"] == "identical" and tgi["loads"] and tgi["differs"] == [] and tgi["fails"] == []
    assert tgi["identical"] == tgi["renders"] > 40


def test_the_baseline_renders_identically_in_tgi(good: Path) -> None:
    result = check(context(good, engines="tgi"), "engine-parity")
    assert result.status == "pass"
    assert result.message.startswith("tgi minijinja") and "render all" in result.message


def test_tojson_with_ensure_ascii_fails_in_tgi_naming_the_construct_and_the_rewrite(good: Path) -> None:
    broken = GOOD.replace("tools | tojson", "tools | tojson(ensure_ascii=False)")
    result = check(context(good, broken, engines="tgi"), "engine-parity")
    assert result.status == "fail" and result.cause == "template"
    assert "TGI's minijinja cannot render it: TemplateError: too many arguments" in result.message
    assert "TGI's minijinja does not support `tojson(ensure_ascii=...)` (template line 1); write `| tojson`" in (
        result.message
    )
    assert result.detail["engine"] == "tgi" and result.detail["construct"] == "`tojson(ensure_ascii=...)`"
    assert result.hint.startswith("write `| tojson`")
    assert result.detail["engines"]["tgi"]["status"] == "fails" and "tools-declared" in result.detail["probes"]


def test_a_python_method_minijinja_lacks_is_named(good: Path) -> None:
    broken = GOOD.replace("{{- m.content -}}", "{{- m.content.removeprefix('') -}}")
    result = check(context(good, broken, engines="tgi"), "engine-parity")
    assert result.status == "fail"
    assert "string has no method named removeprefix" in result.message
    assert "does not support the Python method `.removeprefix()` (template line 1)" in result.message
    assert "a slice once tested" in result.hint


def test_block_tags_without_whitespace_control_differ_in_tgi(good: Path) -> None:
    loose = GOOD.replace("{{- '<|im_end|>\\n' -}}", "{% if true %}\n{% endif %}{{ '<|im_end|>\\n' }}")
    assert loose != GOOD
    result = check(context(good, loose, engines="tgi"), "engine-parity")
    assert result.status == "fail"
    assert "TGI's minijinja renders differently at char" in result.message
    assert "a `{% ... %}` tag or `{# ... #}` comment without whitespace control (template line 1)" in result.message
    assert "`{%- ... -%}`" in result.hint


def test_tgi_tojson_escaping_is_the_engines_documented_behaviour_a_warning(good: Path) -> None:
    # a tool result written with tojson: TGI writes ' < > & as \\u0027 \\u003c \\u003e \\u0026
    escaping = GOOD.replace("{{- m.content -}}", "{{- m.content | tojson -}}")
    result = check(context(good, escaping, engines="tgi"), "engine-parity")
    warned = [e for e in result.detail["examples"] if e.get("engine_behaviour")]
    assert result.status == "warn" and result.severity == "warning" and result.cause == "engine"
    assert warned and "`| tojson`" in warned[0]["message"]
    assert "tgi's own tojson writes ' < > & as \\u0027 \\u003c \\u003e \\u0026" in warned[0]["message"]
    assert "documented minijinja behaviour" in warned[0]["message"]


def test_an_unavailable_profile_is_skipped_with_its_reason(monkeypatch: pytest.MonkeyPatch, good: Path) -> None:
    missing = MissingProfile("vllm", "the vllm profile cannot be imported (no module named 'x')")
    real = engine_check.engine_profiles
    monkeypatch.setattr(engine_check, "engine_profiles", lambda names: [*real("tgi"), missing])
    result = check(context(good), "engine-parity")
    assert result.status == "pass"
    assert "(vllm skipped: the vllm profile cannot be imported (no module named 'x'))" in result.message
    assert result.detail["engines"]["vllm"] == {"status": "skipped", "version": "missing", "reason": missing.reason}
    monkeypatch.setattr(engine_check, "engine_profiles", lambda names: [missing])
    only_missing = check(context(good), "engine-parity")
    assert only_missing.status == "skip" and "vllm skipped" in only_missing.message


# A tool whose schema holds the four characters minijinja's tojson escapes.
ESCAPED_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Don't pass <html> & markup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


@pytest.mark.parametrize("family", ["gemma3-tools", "llama3.2-pythonic"])
def test_tgi_tojson_escaping_in_a_bundled_familys_tool_prompt_is_documented_behaviour(good: Path, family: str) -> None:
    """model_configs/README.md, "Engines": a tool schema with ' < > & reaches the model escaped in TGI."""
    var = get_family(family).variant()
    probe = Probe("tools-escaped", ({"role": "user", "content": "Find it"},), (ESCAPED_TOOL,), True)
    result = check(context(good, var.template, probes=(probe,), variant=var, engines="tgi"), "engine-parity")
    assert result.status == "warn" and result.cause == "engine", result.message
    assert "TGI's minijinja renders differently" in result.message and "\\u0027" in result.message
    assert "documented minijinja behaviour" in result.message and result.detail["engine_behaviour"] is True


def test_the_html_report_shows_the_first_differing_engine_side_by_side(good: Path) -> None:
    loose = GOOD.replace("{{- '<|im_end|>\\n' -}}", "{% if true %}\n{% endif %}{{ '<|im_end|>\\n' }}")
    ctx = context(good, loose, engines="tgi")
    result = check(ctx, "engine-parity")
    aligned = _failure_sides(ctx, result)
    assert aligned is not None
    assert aligned.left.title == f"transformers, probe {result.probe}"
    assert aligned.right.title == f"TGI's minijinja, probe {result.probe}"
    assert aligned.first_difference is not None


def test_blame_reads_each_engines_error_words() -> None:
    sameas = blame_error("llama.cpp", "x\n{% if a is sameas none %}", "compile:parser: Parser Error: Expected %}")
    assert sameas == Blame("`is sameas none`", 2, "`is none`")
    escape = blame_error("llama.cpp", "{{ x | e }}", "render:Error: Unknown (built-in) filter 'e' for type String")
    assert escape is not None and escape.construct == "the filter `| e`" and "never HTML-escaped" in escape.rewrite
    test = blame_error("tgi", "{{ x is odd2 }}", "TemplateError: unknown test: test odd2 is unknown")
    assert test is not None and test.construct == "the test `is odd2`" and test.line == 1
    assert blame_error("tgi", "{{ x }}", "TemplateError: undefined value") is None  # nothing known: no guess
    # A filter the engine has, on a null value it passes as given: the null is to blame, not the filter.
    template = "{% for m in messages %}\n{% if m.tool_calls | length > 0 %}{% endif %}{% endfor %}"
    null = blame_error("llama.cpp", template, "render:Error: Unknown (built-in) filter 'length' for type None")
    assert null is not None and null.line == 2 and "applied to a null value" in null.construct
    assert "(x or []) | length" in null.rewrite and "tool_calls: null" in null.rewrite
    js = blame_error("transformers.js", template, 'Error: Cannot apply filter "length" to type: UndefinedValue')
    assert js is not None and js.construct == "the filter `| length` applied to a null or missing value"
    assert "a key the data leaves out, such as a tool's `parameters`" in js.rewrite and js.line == 2
    assert blame_difference("tgi", "{{ x }}", "a b", "a\u00a0b", 1) is None


class JinjaStub:
    """An engine profile that renders with Jinja as transformers does, but prints a list or dict the template writes
    whole as JSON (as transformers.js does), adds the variables in `server_defaults` (as llama-server adds
    `enable_thinking`), and passes its output through `mangle`."""

    name = label = version = "stub"

    def __init__(
        self, mangle: Any = None, server_defaults: dict[str, Any] | None = None, joins_parts: bool = False
    ) -> None:
        self.mangle = mangle or (lambda text: text)
        self.server_defaults = server_defaults or {}
        self.joins_parts = joins_parts
        self.fixed_clock = CLOCK

    def unavailable(self) -> None:
        return None

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: datetime.datetime) -> list[Rendered]:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=lambda v: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v,
        )
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        env.globals["strftime_now"] = CLOCK.strftime
        compiled = env.from_string(template)
        return [
            Rendered(
                self.mangle(
                    compiled.render(
                        **{**self.server_defaults, **job.variables},
                        messages=[self._joined(m) for m in job.messages],
                        tools=job.tools,
                        add_generation_prompt=job.add_generation_prompt,
                    )
                )
            )
            for job in jobs
        ]

    def _joined(self, message: dict[str, Any]) -> dict[str, Any]:
        """The text parts joined, the parts without text (an image) left out, as llama-server does."""
        if not self.joins_parts or not isinstance(message.get("content"), list):
            return message
        return {**message, "content": "\n".join(p["text"] for p in message["content"] if p["type"] == "text")}


# Prints each message's content whole: a list of content parts is stringified, never read.
STRINGIFIES = "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor -%}"
PARTS = Probe("parts", ({"role": "user", "content": [{"type": "text", "text": "Hé there"}]},), None, False)


def _stubbed(monkeypatch: pytest.MonkeyPatch, stub: JinjaStub) -> None:
    monkeypatch.setattr(engine_check, "engine_profiles", lambda names: [stub])


def test_a_content_list_stringified_as_json_is_a_note_not_an_engine_error(
    monkeypatch: pytest.MonkeyPatch, good: Path
) -> None:
    _stubbed(monkeypatch, JinjaStub())
    result = check(context(good, STRINGIFIES, probes=(PARTS,)), "engine-parity")
    assert result.status == "info" and result.severity == "info" and result.cause == "value formatting"
    assert "stub renders differently" in result.message
    assert "prints a list or dict the template writes whole as JSON where transformers prints Python's repr" in (
        result.message
    )
    assert result.detail["stringified_values"] is True and "loop over content parts" in result.hint


def test_a_real_difference_beside_a_stringified_list_still_fails(monkeypatch: pytest.MonkeyPatch, good: Path) -> None:
    _stubbed(monkeypatch, JinjaStub(mangle=lambda text: text.replace("<|im_end|>", "<|im_end|> ")))
    result = check(context(good, STRINGIFIES, probes=(PARTS,)), "engine-parity")
    assert result.status == "fail" and "stringified_values" not in result.detail


THINKS = "{%- if enable_thinking is defined and enable_thinking -%}<think>{%- endif -%}" + GOOD


def test_a_variable_the_server_defines_on_its_own_is_info_with_the_flag_that_serves_the_training_prompt(
    monkeypatch: pytest.MonkeyPatch, good: Path
) -> None:
    _stubbed(monkeypatch, JinjaStub(server_defaults={"enable_thinking": True, "drop_thinking": False}))
    result = check(context(good, THINKS), "engine-parity")
    assert result.status == "info" and result.severity == "info" and result.cause == "engine"
    assert "stub defines `enable_thinking` = true in the template's context on its own" in result.message
    assert result.detail["engine_defaults"] == {"enable_thinking": True}  # drop_thinking: the template never reads it
    assert """`llama-server --chat-template-kwargs '{"enable_thinking": false}'`""" in result.hint
    # the value set by the caller is passed to both sides: nothing differs
    assert check(context(good, THINKS, kwargs={"enable_thinking": True}), "engine-parity").status == "pass"


def test_a_server_default_beside_another_difference_still_fails(monkeypatch: pytest.MonkeyPatch, good: Path) -> None:
    # the engine's default explains `<think>`, not the space it also writes: the difference is the engine's own
    stub = JinjaStub(
        server_defaults={"enable_thinking": True}, mangle=lambda text: text.replace("<|im_end|>", " <|im_end|>")
    )
    _stubbed(monkeypatch, stub)
    result = check(context(good, THINKS), "engine-parity")
    assert result.status == "fail" and "engine_defaults" not in result.detail, result.message


def test_llama_server_gives_gpt_oss_templates_reasoning_content_as_thinking() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "reasoning_content": "Think", "content": "Hello"},
        {"role": "assistant", "reasoning_content": "Call", "content": "", "tool_calls": [call]},
    ]
    assert gpt_oss_messages(messages) == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "reasoning_content": "Think", "content": "Hello", "thinking": "Think"},
        {"role": "assistant", "reasoning_content": "Call", "tool_calls": [call], "thinking": "Call"},
    ]
    assert messages[2]["content"] == ""  # the caller's messages are not changed


def test_joined_text_parts_are_recognized_at_the_engines_own_clock(monkeypatch: pytest.MonkeyPatch, good: Path) -> None:
    # the template writes today's date: transformers renders the joined parts again at the clock the engine pins
    _stubbed(monkeypatch, JinjaStub(joins_parts=True))
    dated = "{{ strftime_now('%Y-%m-%d') }}\n" + STRINGIFIES
    result = check(context(good, dated, probes=(PARTS,)), "engine-parity")
    assert result.status == "info" and result.detail["joins_text_parts"] is True, result.message


IMAGE = Probe(
    "image",
    (
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "x.png"}}, {"type": "text", "text": "Hi"}],
        },
    ),
    None,
    False,
)
# Writes an image part as [IMG] and a text part's text: an engine that leaves images out writes no [IMG].
READS_IMAGES = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
    "{%- if m.content is string -%}{{ m.content }}{%- else -%}"
    "{%- for p in m.content -%}{{ '[IMG]' if p.type == 'image_url' else p.text }}{%- endfor -%}{%- endif -%}"
    "<|im_end|>\n{%- endfor -%}"
)


def test_an_image_the_engine_leaves_out_is_its_request_handling_info(
    monkeypatch: pytest.MonkeyPatch, good: Path
) -> None:
    _stubbed(monkeypatch, JinjaStub(joins_parts=True))
    result = check(context(good, READS_IMAGES, probes=(IMAGE,)), "engine-parity")
    assert result.status == "info" and result.cause == "input normalization", result.message
    assert "transformers <|im_start|>user⟨here⟩[IMG]Hi<|im_end|> vs stub <|im_start|>user⟨here⟩Hi<|im_end|>" in (
        result.message
    )
    assert "stub leaves out a message's parts without text (an image) and joins its text parts into one string" in (
        result.message
    )
    assert "transformers given the request so rewritten renders exactly so" in result.message
    assert result.detail["joins_text_parts"] is True and "the text alone" in result.hint


def test_an_image_left_out_beside_another_difference_still_fails(monkeypatch: pytest.MonkeyPatch, good: Path) -> None:
    _stubbed(monkeypatch, JinjaStub(joins_parts=True, mangle=lambda text: text.replace("<|im_end|>", " <|im_end|>")))
    result = check(context(good, READS_IMAGES, probes=(IMAGE,)), "engine-parity")
    assert result.status == "fail" and "preprocessing" not in result.detail, result.message
