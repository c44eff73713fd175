"""`port`: each rewrite renders as the original in transformers and the same without trim_blocks/lstrip_blocks;
`port_template` keeps a rewrite only where it is proven, and says why it kept none."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.template.engines.registry import engine_profiles
from hf_chat_templates.template.rendering import normalize_for_template
from hf_chat_templates.template.rewrites import REWRITES, Rewrite, segments
from hf_chat_templates.verification import port as port_module
from hf_chat_templates.verification.port import port_template
from tests.helpers import run

DATA = Path(__file__).resolve().parents[1] / "data"
REWRITE = {r.name: r.apply for r in REWRITES}


def _env(trim: bool) -> jinja2.Environment:
    env = ImmutableSandboxedEnvironment(trim_blocks=trim, lstrip_blocks=trim)
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(x, indent=indent)
    env.globals["raise_exception"] = lambda message: (_ for _ in ()).throw(jinja2.TemplateError(message))
    env.globals["strftime_now"] = lambda fmt: "2024-01-02"
    return env


def _render(env: jinja2.Environment, template: str, **variables: object) -> str:
    try:
        return env.from_string(template).render(bos_token="<s>", eos_token="</s>", **variables)
    except Exception as err:  # the same failure on both sides is the same rendering
        return f"failed: {type(err).__name__}"


@pytest.mark.parametrize(
    "template",
    [
        "a\n  {% if x %}\nb\n  {% endif %}\n\nc",  # indentation, one newline trimmed, the next one kept
        "x  {% if x %}y{% endif %}\n",  # text before the tag on its line: not stripped
        "  {# note #}\nz",  # a comment at the template's start
        "{{ key }}:{\n{%- if x -%}v{%- endif %}",  # a `{` before a tag
        "{% for m in ms %}\n\n{{ m }}\n{% endfor %}\n",  # a second newline after a tag
        "{% if x %}\r\nq{% endif %}",  # CRLF
        "{%- if x %}\n\n{#- c #}\nk{% endif %}",  # a blank line a `{#-` strips anyway
        "{%+ if x %}a{% endif +%}\nb",  # explicit controls kept as they are
    ],
)
def test_whitespace_rewrite_renders_the_same_with_and_without_trimming(template: str) -> None:
    ported = REWRITE["whitespace"](template) or template
    for x in (True, False):
        expected = _render(_env(True), template, x=x, ms=["a", "b"], key="k")
        assert _render(_env(True), ported, x=x, ms=["a", "b"], key="k") == expected
        assert _render(_env(False), ported, x=x, ms=["a", "b"], key="k") == expected


def test_whitespace_rewrite_keeps_the_layout() -> None:
    template = "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}"
    assert REWRITE["whitespace"](template) == (
        "{% for m in messages\n%}{%     if m.role == 'user'\n%}{{ m.content }}\n{%     endif\n%}{% endfor %}"
    )


PUBLISHED = sorted((DATA / "templates").glob("*/chat_template.jinja"))


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.parent.name)
def test_whitespace_rewrite_on_published_templates(path: Path) -> None:
    template = path.read_text(encoding="utf-8")
    ported = REWRITE["whitespace"](template)
    if ported is None:
        return
    for probe in build_probes("openai")[::3]:
        variables = {
            "messages": normalize_for_template(probe.message_list()),
            "tools": probe.tool_list(),
            "add_generation_prompt": probe.add_generation_prompt,
        }
        expected = _render(_env(True), template, **variables)
        assert _render(_env(True), ported, **variables) == expected, probe.id
        assert _render(_env(False), ported, **variables) == expected, probe.id


def test_segments_refuse_what_they_cannot_scan() -> None:
    assert segments("{% raw %}{{ x }}{% endraw %}") is None
    assert segments("text {{ unclosed") is None
    assert segments("a {{ '%}' }} b") == [("data", "a "), ("var", "{{ '%}' }}"), ("data", " b")]


def test_construct_rewrites() -> None:
    assert REWRITE["tojson-ensure-ascii"]("{{ t | tojson(ensure_ascii=False) }}") == "{{ t | tojson }}"
    assert REWRITE["tojson-ensure-ascii"]("{{ t | tojson(indent=2, ensure_ascii=False) }}") == (
        "{{ t | tojson(indent=2) }}"
    )
    assert REWRITE["tojson-ensure-ascii"]("{{ t | tojson(ensure_ascii=True) }}") is None
    assert REWRITE["is-sameas"]("{% if x is not sameas false %}") == "{% if x is not false %}"
    assert REWRITE["string-methods"]("{{ m['content'].strip() ~ n.upper() }}") == (
        "{{ (m['content'] | trim) ~ (n | upper) }}"
    )
    assert REWRITE["string-methods"]("say .strip() in text") is None


def _tgi_available() -> bool:
    (tgi,) = engine_profiles("tgi")
    return tgi.unavailable() is None


TGI_TEMPLATE = (
    "{% for message in messages %}\n"
    "    {% if message['role'] == 'user' %}\n"
    "<|user|>{{ message['content'] }}<|end|>\n"
    "    {% else %}\n"
    "<|assistant|>{{ message['content'] }}<|end|>\n"
    "    {% endif %}\n"
    "{% endfor %}\n"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.mark.skipif(not _tgi_available(), reason="the tgi profile needs minijinja: pip install -e '.[reference]'")
def test_port_applies_a_proven_rewrite(tmp_path: Path) -> None:
    source = tmp_path / "chat_template.jinja"
    source.write_text(TGI_TEMPLATE, encoding="utf-8")
    result = port_template(source, engines="tgi")
    applied = [s.rewrite.name for s in result.steps if s.status == "applied"]
    assert applied == ["whitespace"]
    before, after, total = result.engines["tgi"]
    assert before < after == total
    assert "applied     whitespace" in result.describe()


@pytest.mark.skipif(not _tgi_available(), reason="the tgi profile needs minijinja: pip install -e '.[reference]'")
def test_port_refuses_a_rewrite_that_changes_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "chat_template.jinja"
    source.write_text(TGI_TEMPLATE, encoding="utf-8")
    careless = Rewrite("careless", "a rewrite that changes text", lambda t: t.replace("<|end|>\n", "<|end|>"))
    monkeypatch.setattr(port_module, "REWRITES", (careless,))
    result = port_template(source, engines="tgi")
    (step,) = result.steps
    assert step.status == "not proven"
    assert step.reason.startswith("transformers would render ")
    assert result.template == TGI_TEMPLATE
    assert not result.changed


@pytest.mark.skipif(not _tgi_available(), reason="the tgi profile needs minijinja: pip install -e '.[reference]'")
def test_port_cli_writes_the_template_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "chat_template.jinja"
    source.write_text(TGI_TEMPLATE, encoding="utf-8")
    out = tmp_path / "ported.jinja"
    code, stdout, _ = run(capsys, "port", str(source), "--output", str(out), "--engines", "tgi", "--no-diff")
    assert code == 0
    assert f"wrote {out}" in stdout
    assert out.read_text(encoding="utf-8") == REWRITE["whitespace"](TGI_TEMPLATE)
    code, _, err = run(capsys, "port", str(source), "--output", str(out), "--engines", "tgi")
    assert code == 2
    assert f"{out}: exists" in err
    code, _, err = run(capsys, "port", str(tmp_path / "nope.jinja"))
    assert code == 2
    assert "nope.jinja: not found" in err
