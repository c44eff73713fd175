"""Ollama's profile end to end: the Go renderer built with `go build`, each construct the translation supports
rendered by it exactly as transformers renders the Jinja, `export ollama` proving a corpus template and refusing
the others by name, and `verify --ollama-modelfile` failing a Go template that serves other text. Skipped, with the
install command, where `go` is not on PATH."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from hf_chat_templates.installation.modelfile import read_modelfile
from hf_chat_templates.template.engines.gotemplate import translate
from hf_chat_templates.template.engines.ollama import INSTALL, build_renderer, go_command, render_go
from hf_chat_templates.template.limits import RenderLimits

from ..helpers import CORPUS, run
from ..unit.test_gotemplate import CONSTRUCTS

CLOCK = _dt.datetime(2024, 7, 26, 10, 30)
VARIABLES = {"bos_token": "<s>", "eos_token": "</s>"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATIONS = [
    [{"role": "user", "content": "Hi {there}"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
    ],
    [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "21 C", "tool_call_id": "call_1"},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ],
    [{"role": "tool", "content": "first"}, {"role": "user", "content": "then"}],
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {}}}]


@pytest.fixture(scope="module")
def go_renderer() -> Path:
    if go_command() is None:
        pytest.skip(f"ollama profile: go is not on PATH: {INSTALL}")
    return build_renderer()


def _transformers(template: str, messages: list[dict], tools: list[dict] | None) -> str:
    agp = messages[-1]["role"] != "assistant"  # the requests Ollama makes
    try:
        rendered, _ = render_jinja_template(
            conversations=[messages], tools=tools, chat_template=template, add_generation_prompt=agp, **VARIABLES
        )
    except Exception as err:  # raise_exception: Ollama must refuse too
        return f"REFUSED {err}"
    return rendered[0]


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_each_construct_renders_in_go_as_transformers_renders_it(go_renderer: Path, name: str) -> None:
    template = CONSTRUCTS[name]
    go = translate(template, VARIABLES)
    jobs = [{"messages": m, "tools": TOOLS} for m in CONVERSATIONS]
    outs = render_go(go, jobs, CLOCK, RenderLimits.from_env())
    for job, out in zip(jobs, outs):
        expected = _transformers(template, job["messages"], TOOLS)
        if expected.startswith("REFUSED"):
            assert "raise_exception: no tool first" in out["error"]
        else:
            assert out == {"text": expected}, (name, job["messages"])


def test_the_renderer_collates_and_runs_legacy_templates_as_ollama(go_renderer: Path) -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "r"},
        {"role": "user", "content": "u2"},
    ]
    chat = "{{ .System }}|{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}"
    legacy = "{{ if .System }}S:{{ .System }} {{ end }}U:{{ .Prompt }} A:{{ .Response }}<end> "
    outs = render_go(chat, [{"messages": messages}], CLOCK, RenderLimits.from_env())
    outs += render_go(legacy, [{"messages": messages}], CLOCK, RenderLimits.from_env())
    assert outs[0] == {"text": "s|<system>s<user>a\n\nb<assistant>r<user>u2"}  # parts joined by collation
    assert outs[1] == {"text": "S:s U:a\n\nb A:r<end> U:u2 A:"}  # cut after {{ .Response }} the last time
    (refused,) = render_go(chat, [{"messages": [{"role": "user", "content": None}]}], CLOCK, RenderLimits.from_env())
    assert refused["refused"] and "not a string" in refused["error"]


def test_export_proves_a_corpus_template_and_verify_reads_the_modelfile_back(
    capsys: pytest.CaptureFixture[str], go_renderer: Path, toy_tokenizer: Path, tmp_path: Path
) -> None:
    out = tmp_path / "Modelfile"
    template = CORPUS / "hermes-3" / "chat_template.jinja"
    code, _, err = run(
        capsys,
        "export",
        "ollama",
        str(toy_tokenizer),
        "--template",
        str(template),
        "--from",
        "m.gguf",
        "--output",
        str(out),
    )
    assert code == 0 and "proved: the Go template renders" in err
    modelfile = read_modelfile(out.read_text(encoding="utf-8"))
    assert modelfile.base == "m.gguf" and modelfile.stops == ("<|im_end|>",)
    args = ["verify", str(toy_tokenizer), "--template", str(template), "--only", "engine-parity"]
    code, text, _ = run(capsys, *args, "--ollama-modelfile", str(out))
    assert code == 0 and "ollama Go text/template" in text and "exactly as transformers" in text
    broken = tmp_path / "Broken"
    broken.write_text(
        out.read_text(encoding="utf-8").replace("<|im_start|>{{ $message.Role }}", "<|im_start|> {{ $message.Role }}")
    )
    code, text, _ = run(capsys, *args, "--ollama-modelfile", str(broken))
    assert code == 1 and "probe plain: ollama renders differently at char" in text


def test_export_refuses_by_name_and_names_the_first_difference(
    capsys: pytest.CaptureFixture[str], go_renderer: Path, toy_tokenizer: Path
) -> None:
    code, out, err = run(
        capsys, "export", "ollama", str(toy_tokenizer), "--template", str(CORPUS / "llama-3.3" / "chat_template.jinja")
    )
    assert code == 2 and out == "" and "line 17: filter `trim` cannot be translated" in err
    code, out, err = run(
        capsys, "export", "ollama", str(toy_tokenizer), "--template", str(CORPUS / "qwen2.5" / "chat_template.jinja")
    )
    assert code == 1 and out == "" and "probe tools-declared: ollama renders differently" in err


def test_export_json_reports_the_proof(
    capsys: pytest.CaptureFixture[str], go_renderer: Path, toy_tokenizer: Path
) -> None:
    import json

    template = CORPUS / "phi-3.5-mini" / "chat_template.jinja"
    code, out, _ = run(capsys, "export", "ollama", str(toy_tokenizer), "--template", str(template), "--json")
    found = json.loads(out)
    assert code == 0 and found["ok"] and found["identical"] > 0
    assert found["modelfile"].startswith(f'FROM {toy_tokenizer}\nTEMPLATE """')


def test_a_modelfile_without_the_turns_stop_token_is_warned(
    capsys: pytest.CaptureFixture[str], go_renderer: Path, toy_tokenizer: Path, tmp_path: Path
) -> None:
    template = CORPUS / "hermes-3" / "chat_template.jinja"
    out = tmp_path / "Modelfile"
    run(capsys, "export", "ollama", str(toy_tokenizer), "--template", str(template), "--output", str(out))
    unstopped = tmp_path / "Unstopped"
    unstopped.write_text(out.read_text(encoding="utf-8").replace('PARAMETER stop "<|im_end|>"\n', ""))
    args = ["verify", str(toy_tokenizer), "--template", str(template), "--only", "engine-parity"]
    code, text, _ = run(capsys, *args, "--ollama-modelfile", str(unstopped))
    assert code == 0 and "warn engine-parity" in text and "Modelfile has no PARAMETER stop '<|im_end|>'" in text
    code, text, _ = run(capsys, *args, "--ollama-modelfile", str(out))
    assert code == 0 and "PARAMETER stop" not in text
