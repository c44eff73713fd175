"""The Jinja-to-Go translation for Ollama: each construct chat templates use becomes its Go template form, and what
Go templates cannot express is refused by name and line. (tests/e2e/test_ollama.py renders these templates with
the Go renderer and compares each with transformers' rendering.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_chat_templates.installation.modelfile import Modelfile, ModelfileError, read_modelfile
from hf_chat_templates.template.engines import ENGINES, engine_names
from hf_chat_templates.template.engines.gotemplate import PREAMBLE, Untranslatable, refusal, refusals, translate
from hf_chat_templates.template.engines.registry import ollama_profile

from ..helpers import CORPUS

# One small template per construct the translation supports (tests/e2e/test_ollama.py renders each in Go).
CONSTRUCTS = {
    "loop and role tests": (
        "{% for message in messages %}{% if message.role == 'user' %}U:{{ message.content }}"
        "{% elif message['role'] in ['assistant', 'model'] %}A:{{ message['content'] }}{% else %}"
        "{{ message.role }}{% endif %}\n{% endfor %}"
    ),
    "generation prompt": (
        "{% for m in messages %}{{ m.content }}|{% endfor %}{% if add_generation_prompt %}GO{% endif %}"
    ),
    "system message first": (
        "{% if messages[0].role == 'system' %}{% set system = messages[0].content %}{% set rest = messages[1:] %}"
        "{% else %}{% set system = 'default' %}{% set rest = messages %}{% endif %}"
        "<sys>{{ system }}</sys>{% for m in rest %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    ),
    "namespace flags": (
        "{% set ns = namespace(seen=false, last='') %}{% for m in messages %}{% if m.role == 'user' %}"
        "{% set ns.seen = true %}{% set ns.last = m.content %}{% endif %}{% endfor %}"
        "{% if ns.seen %}last user: {{ ns.last }}{% endif %}"
    ),
    "a value joined": (
        "{% for m in messages %}{% set tag = m.role ~ loop.index0 ~ loop.index0 %}{{ tag }}{% endfor %}"
    ),
    "namespace set later": (
        "{% set ns = namespace() %}{% for m in messages %}{% if ns.seen %}+{% endif %}{{ m.role }}"
        "{% set ns.seen = true %}{% endfor %}"
    ),
    "loop first, last and index": (
        "{% for m in messages %}{% if loop.first %}<first>{% endif %}{{ loop.index0 }}{% if loop.index == 2 %}"
        "(two){% endif %}{% if loop.last %}<last>{% endif %}{% endfor %}"
    ),
    "the last message": "{{ messages[-1].role }}:{{ messages[-1]['content'] }}",
    "neighbours": (
        "{% for m in messages %}{% if loop.index0 == 0 or messages[loop.index0 - 1].role != m.role %}<{{ m.role }}>"
        "{% endif %}{{ m.content }}{% if loop.last or messages[loop.index0 + 1].role != m.role %}</>{% endif %}"
        "{% endfor %}"
    ),
    "tool calls": (
        "{% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{% if tc.function is defined %}"
        "{% set tc = tc.function %}{% endif %}<call>{{ tc.name }} {{ tc.arguments | tojson }}</call>"
        "{% endfor %}{% elif m.role == 'tool' %}<result>{{ m.content }}</result>{% else %}{{ m.content }}"
        "{% endif %}{% endfor %}"
    ),
    "tools named": "{% if tools %}{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}{{ bos_token }}",
    "concatenation and constants": (
        "{{ bos_token + '[' ~ messages[0].content ~ ']' }}{% if not enable_thinking is defined %}{{ eos_token }}"
        "{% endif %}"
    ),
    "raise_exception": "{% if messages[0].role == 'tool' %}{{ raise_exception('no tool first') }}{% endif %}ok",
    "text with braces": '{% for m in messages %}{"c": "{{ m.content }}"}{{ \'{{\' }}{% endfor %}',
    "loop controls": (
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.content }}{% endfor %}"
    ),
    "filters kept": (
        "{{ (messages | first).content | string }}{% for m in messages %}{{ m.role | tojson(ensure_ascii=False) }}"
        "{% endfor %}"
    ),
    "generation tag": "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
}

# A construct Go templates cannot express, the name the refusal gives it, and its line.
REFUSED = [
    ("{{ messages[0].content | trim }}", "filter `trim`", 1),
    ("\n{% macro m(x) %}{{ x }}{% endmacro %}", "a macro", 2),
    ("{{ messages | length - 1 }}", "arithmetic (`-`)", 1),
    ("{% for m in messages %}{{ loop.index }}{% endfor %}", "loop.index", 1),
    ("{% if '<think>' in messages[0].content %}x{% endif %}", "`in` over a value", 1),
    ("{{ messages[0].content.strip() }}", "method `.strip()`", 1),
    ("{{ strftime_now('%d %B %Y') }}", "strftime_now('%d %B %Y')", 1),
    ("{{ messages[-2].content }}", "[-2]", 1),
    ("{{ tools | tojson(indent=4) }}", "tojson with arguments", 1),
    (
        "{% for m in messages %}{{ m.tool_calls[0].function.arguments }}{% endfor %}",
        "tool-call arguments written whole",
        1,
    ),
    ("{% set x = 'a' if messages else 'b' %}", "an inline `if … else`", 1),
    ("{% for k, v in messages %}{% endfor %}", "unpacking in a loop", 1),
    ("\n{% if reasoning_effort < 3 %}x{% endif %}", "a comparison (`lt`)", 2),
    ("{% if foo | length > 2 %}x{% endif %}", "filter `length` on a constant", 1),
]


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_each_supported_construct_translates(name: str) -> None:
    go = translate(CONSTRUCTS[name], {"bos_token": "<s>", "eos_token": "</s>"})
    assert go.startswith(PREAMBLE)
    assert "{{-" not in go and "-}}" not in go  # whitespace is Jinja's, already applied: Go trims nothing


def test_the_data_model_is_ollamas() -> None:
    go = translate(CONSTRUCTS["tool calls"])
    assert "$m.ToolCalls" in go and "$tc.Function" in go and "$tc.Name" in go
    assert "{{ range $key, $value := $tc.Arguments }}" in go  # tojson of arguments: written key by key
    assert translate("{{ messages[0].reasoning_content }}").endswith("{{ (index $.Messages 0).Thinking }}")
    assert translate("{% for t in tools %}{{ t | tojson }}{% endfor %}").endswith("{{ json $t }}{{ end }}")
    # add_generation_prompt is the end of the prompt: set from the last message's role
    assert '$add_generation_prompt = ne .Role "assistant"' in PREAMBLE
    # raise_exception: a template Ollama cannot find, named after the message, fails the request with it
    assert '{{ template "raise_exception: no tool first" . }}' in translate(CONSTRUCTS["raise_exception"])


def test_constants_are_written_in_and_dead_branches_dropped() -> None:
    go = translate(CONSTRUCTS["concatenation and constants"], {"bos_token": "<s>", "eos_token": "</s>"})
    assert go == PREAMBLE + "<s>[{{ (index $.Messages 0).Content }}]</s>"
    go = translate("{% if enable_thinking %}T{% else %}F{% endif %}", {"enable_thinking": True})
    assert go == PREAMBLE + "T"
    # Ollama's content is always a string
    assert translate("{% if messages[0].content is string %}S{% else %}L{% endif %}") == PREAMBLE + "S"


def test_text_go_would_read_as_an_action_is_written_by_one() -> None:
    assert translate("a{{ '{{' }}b{") == PREAMBLE + 'a{{ "{" }}{{ "{" }}b{{ "{" }}'
    assert translate("x\u200dy") == PREAMBLE + 'x{{ "\\u200d" }}y'  # a Modelfile would drop U+200D


def test_set_in_a_loop_is_the_loops_own_and_set_in_an_if_leaks() -> None:
    go = translate("{% for m in messages %}{% set x = m.role %}{% endfor %}{% if true %}{% set y = 1 %}{% endif %}")
    assert '{{ range $i1, $m := $it1 }}{{ $x := "" }}{{ $x = $m.Role }}{{ end }}' in go
    assert go.startswith(PREAMBLE + '{{ $y := "" }}')


@pytest.mark.parametrize(("source", "construct", "line"), REFUSED)
def test_what_go_cannot_express_is_refused_by_name_and_line(source: str, construct: str, line: int) -> None:
    with pytest.raises(Untranslatable) as caught:
        translate(source)
    assert caught.value.construct.startswith(construct) and caught.value.line == line
    assert refusal(caught.value).startswith(f"line {line}: {construct}")


def test_corpus_templates_translate_or_are_refused_by_name() -> None:
    found = {}
    for folder in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        try:
            translate((folder / "chat_template.jinja").read_text(encoding="utf-8"), {"bos_token": "<s>"})
            found[folder.name] = "translates"
        except Untranslatable as err:
            found[folder.name] = err.construct
    assert found["hermes-3"] == found["phi-3.5-mini"] == found["qwen2.5"] == "translates"
    assert found["llama-3.3"] == "filter `trim`" and found["gemma-4"] == "a macro"


def test_every_bundled_variant_translates_or_is_refused_by_name() -> None:
    """Never an internal error: gpt-oss's variants once compared an undefined keyword with a number."""
    from hf_chat_templates.families.registry import list_families

    for family in list_families():
        for variant in family.variants.values():
            for variables in ({"bos_token": "<s>"}, {"bos_token": "<s>", **variant.kwarg_defaults}):
                for err in refusals(variant.template, variables):
                    assert refusal(err).startswith(f"line {err.line}: ")


def test_modelfile_round_trip_and_refusals() -> None:
    mf = Modelfile("./model.gguf", 'A "quoted" {{ .Content }}\n  end ', ("<|im_end|>", " spaced "))
    text = mf.text()
    assert text.startswith('FROM ./model.gguf\nTEMPLATE """A "quoted"')
    assert 'PARAMETER stop "<|im_end|>"\nPARAMETER stop " spaced "\n' in text
    assert read_modelfile(text) == mf
    with pytest.raises(ModelfileError, match='holds """ at character 2'):
        Modelfile("m", 'ab"""c').text()
    with pytest.raises(ModelfileError, match="U\\+200B"):
        Modelfile("m", "a\u200bb").text()
    with pytest.raises(ModelfileError, match="never closed"):
        read_modelfile('FROM m\nTEMPLATE """abc\n')


def test_ollama_is_compared_by_default_only_with_a_go_template() -> None:
    assert ENGINES[-1] == "ollama" and "ollama" not in engine_names(None)
    assert engine_names("ollama") == ("ollama",)
    profile = ollama_profile()
    profile.given = "{{ .Prompt }}"
    try:
        assert "ollama" in engine_names(None)
    finally:
        profile.given = None
    assert "no Go template to compare" in str(profile.unavailable()) or "go is not on PATH" in str(
        profile.unavailable()
    )


def test_every_blocking_construct_is_listed() -> None:
    found = [(e.line, e.construct) for e in refusals((CORPUS / "llama-3.3" / "chat_template.jinja").read_text())]
    assert found[0] == (17, "filter `trim`") and (67, "`in` over a value") in found and len(found) == 6
    assert refusals(CONSTRUCTS["tool calls"]) == []


def test_without_go_the_profile_is_skipped_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hf_chat_templates.template.engines import ollama

    monkeypatch.setattr(ollama, "go_command", lambda: None)
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path))  # no renderer built there
    profile = ollama.OllamaEngine()
    profile.translating = True
    assert profile.unavailable() == f"go is not on PATH: {ollama.INSTALL}"
    assert ollama.INSTALL.startswith("pip install -e '.[ollama]'")
    with pytest.raises(RuntimeError, match=r"go is not on PATH: pip install -e '\.\[ollama\]'"):
        ollama.build_renderer()


def test_requests_ollama_cannot_make_are_left_out_not_failed() -> None:
    from hf_chat_templates.template.engines.base import EngineRendered, RenderJob
    from hf_chat_templates.template.engines.ollama import _not_expressed

    closed = RenderJob([{"role": "user", "content": "hi"}], None, False)
    out = _not_expressed(closed)
    assert isinstance(out, EngineRendered) and out.input_refused and "no add_generation_prompt" in str(out.error)
    assert _not_expressed(RenderJob([{"role": "user", "content": "hi"}], None, True)) is None
    assert _not_expressed(RenderJob([{"role": "assistant", "content": "a"}], None, False)) is None


def test_a_modelfiles_missing_stop_tokens_are_named() -> None:
    from hf_chat_templates.template.engines.ollama import OllamaEngine

    profile = OllamaEngine()
    assert profile.missing_stops(("<|im_end|>",)) == []  # no Modelfile given: nothing to say
    profile.given, profile.given_stops = "{{ .Prompt }}", ("</s>",)
    assert profile.missing_stops(("<|im_end|>", "</s>")) == ["<|im_end|>"]
