"""The llama.cpp profile: llama.cpp's own Jinja engine (ggufdoctor's WebAssembly build), on real templates.

Each construct llama.cpp lacks fails `engine-parity` naming llama.cpp, the construct, where the template writes it
and the portable rewrite; the rewrite passes. Every bundled family's default variant renders in llama.cpp exactly
the text transformers renders, on plain, multi-turn, generation-prompt and tool-call conversations.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from hf_chat_templates import get_family, list_families
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.template.engines import RenderJob, engine_profiles
from hf_chat_templates.template.engines.llamacpp import LlamaCppEngine, _wasm_engine
from hf_chat_templates.verification.checks.engines import reference, render_in

from ..helpers import GOOD, check, context, verify_recording_workers

CONVERSATIONS = ("plain", "multi-turn", "generation-prompt", "tool-call", "parallel-tool-calls", "agent-loop")


def _llamacpp(template: str, variables: dict, messages: list | None = None) -> str | None:
    job = RenderJob(messages or [{"role": "user", "content": "Hi"}], None, False, variables)
    (out,) = LlamaCppEngine().render_all(template, [job], clock=datetime.datetime(2024, 1, 2))
    return out.text if out.ok else f"ERROR {out.error}"


def test_the_module_is_compiled_once_and_our_variables_win_over_ggufdoctors_defaults() -> None:
    engine = LlamaCppEngine()
    assert engine.unavailable() is None and engine.version.startswith("b")
    show = "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt is defined }}|{{ date_string }}"
    assert _llamacpp(show, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "date_string": "x"}) == (
        "<|begin_of_text|>|<|eot_id|>|False|x"
    )
    # a tokenizer without a bos token: "" as llama.cpp passes it, never ggufdoctor's "<s>"
    assert _llamacpp("[{{ bos_token }}]", {"eos_token": "</s>"}) == "[]"
    assert _llamacpp("{{ strftime_now('%Y-%m-%d') }}", {}) == f"{engine.fixed_clock:%Y-%m-%d}"
    assert _wasm_engine() is _wasm_engine() and _wasm_engine()._module is not None  # compiled, kept
    assert engine_profiles("llama.cpp")[0] is engine_profiles("llama.cpp")[0]


BROKEN = [
    (
        "sameas",
        GOOD.replace("{%- if add_generation_prompt -%}", "{%- if add_generation_prompt is sameas true -%}"),
        "probes fail): compile:parser:",  # llama.cpp cannot load the template (N probes fail)
        "llama.cpp does not support `is sameas true` (template line 1); write `is true` or `== true`",
        GOOD.replace("{%- if add_generation_prompt -%}", "{%- if add_generation_prompt is true -%}"),
    ),
    (
        "map-tojson",
        GOOD.replace("tools | tojson", "tools | map('tojson') | join(', ')"),
        "llama.cpp cannot render it: render:NotImplemented: map: filter-mapping not implemented",
        "llama.cpp does not support `map('tojson')` (template line 1); write a loop: `{% for x in items %}"
        "{{ x | tojson }}",
        GOOD.replace(
            "{{- '<|im_start|>tools\\n' + tools | tojson + '<|im_end|>\\n' -}}",
            "{{- '<|im_start|>tools\\n' -}}{%- for t in tools -%}{{- t | tojson -}}"
            "{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}{{- '<|im_end|>\\n' -}}",
        ),
    ),
    (
        "format",
        GOOD.replace("{{- m.content -}}", "{{- '%s' | format(m.content) -}}"),
        "llama.cpp renders differently at char",
        "llama.cpp does not support `'...%s...' | format(x)` (template line 1); write concatenation with `~`",
        GOOD.replace("{{- m.content -}}", "{{- '' ~ m.content -}}"),
    ),
    (
        "python-method",
        GOOD.replace("{{- m.content -}}", "{{- m.content.removeprefix('') -}}"),
        "llama.cpp cannot render it: render:Error: Callee is not a function: got Undefined (hint: 'removeprefix')",
        "llama.cpp does not support the Python method `.removeprefix()` (template line 1); write a slice once tested",
        GOOD.replace("{{- m.content -}}", "{{- m.content[0:] -}}"),
    ),
]


@pytest.mark.parametrize(("name", "broken", "symptom", "blame", "portable"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_construct_llamacpp_lacks_fails_naming_it_and_its_rewrite_passes(
    good: Path, name: str, broken: str, symptom: str, blame: str, portable: str
) -> None:
    result = check(context(good, broken, engines="llama.cpp"), "engine-parity")
    assert result.status == "fail" and result.cause == "template"
    assert symptom in result.message and blame in result.message
    assert result.detail["engine"] == "llama.cpp" and result.hint.startswith("write ")
    assert result.detail["engines"]["llama.cpp"]["status"] in ("does not load", "fails", "differs")
    fixed = check(context(good, portable, engines="llama.cpp"), "engine-parity")
    assert fixed.status in ("pass", "info"), fixed.message  # info: llama-server joins text parts with newlines


def test_llamacpp_joins_text_parts_with_newlines_which_is_info_not_an_error(good: Path) -> None:
    result = check(context(good, engines="llama.cpp"), "engine-parity")
    assert result.status == "info" and result.cause == "input normalization"
    assert result.probe == "content-parts"
    assert "llama.cpp joins a message's text parts with newlines into one string before rendering" in result.message
    assert "transformers …user\\nFirst·part·qz1part.⟨here⟩·Second" in result.message
    assert "llama.cpp …user\\nFirst·part·qz1part.⟨here⟩\\n·Second" in result.message
    assert result.detail["engines"]["llama.cpp"]["worst"] == "info"


def test_the_upstream_llama32_format_call_is_caught(installed_variants: dict[tuple[str, str], Path]) -> None:
    folder = installed_variants[("llama3.2-pythonic", "upstream")]
    var = get_family("llama3.2-pythonic").variant("upstream")
    result = check(context(folder, var.template, variant=var, engines="llama.cpp"), "engine-parity")
    # (the seed also iterates `"tool_calls": null`, which llama.cpp passes: probe tool-calls-null fails first)
    (found,) = [f for f in result.findings if f.probe == "tool-call"]
    assert result.status == "fail" and found.severity == "error"
    assert "[qz1toolname(city=⟨here⟩%s)]" in found.text
    assert "llama.cpp does not support `'...%s...' | format(x)`" in found.text


@pytest.mark.parametrize("family", [f.name for f in list_families()])
def test_every_default_variant_renders_the_same_in_llamacpp(
    family: str, installed_variants: dict[tuple[str, str], Path]
) -> None:
    fam = get_family(family)
    var = fam.variant(fam.default_variant)
    folder = installed_variants[(family, fam.default_variant)]
    probes = tuple(p for p in build_probes() if p.id in CONVERSATIONS)
    ctx = context(folder, var.template, probes=probes, variant=var, engines="llama.cpp")
    (engine,) = engine_profiles("llama.cpp")
    assert {p.add_generation_prompt for p in probes} == {True, False} and any(p.tool_list() for p in probes)
    outs = render_in(ctx, engine, list(probes))
    for probe in probes:
        ours = reference(ctx, engine, probe)
        assert ours.ok, f"{family}: transformers cannot render {probe.id}: {ours.error}"
        assert outs[probe.id].ok, f"{family}/{var.name}: llama.cpp cannot render {probe.id}: {outs[probe.id].error}"
        assert outs[probe.id].text == ours.text, f"{family}/{var.name}: {probe.id} differs in llama.cpp"


def _jobs() -> list[RenderJob]:
    variables = {"bos_token": "<s>", "eos_token": "</s>"}
    chats = [
        [{"role": "user", "content": f"question {n}"}, {"role": "assistant", "content": "answer"}] for n in range(3)
    ]
    return [RenderJob(chat, None, n % 2 == 0, variables) for n, chat in enumerate(chats)]


def test_llama_cpp_renders_in_a_worker_process_as_it_renders_here(monkeypatch: pytest.MonkeyPatch) -> None:
    (engine,) = engine_profiles("llama.cpp")
    if engine.unavailable():
        pytest.skip(engine.unavailable())
    clock = datetime.datetime(2024, 7, 26)
    template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}{{ raise_exception('no') }}"
    sources = (GOOD, template, "{% if %}")  # renders, fails in each job, does not parse
    here = [engine.render_all(source, _jobs(), clock=clock) for source in sources]
    monkeypatch.setattr(engine, "render_all", None)  # no fallback to this process: the worker's outcomes only
    assert [engine.start_all(source, _jobs(), clock=clock)() for source in sources] == here
    assert here[0][0].text and here[1][0].error and here[2][0].error


def test_a_llama_cpp_worker_that_fails_leaves_the_renders_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that cannot start, or that dies without its output: the jobs render here, with the same outcomes."""
    import sys

    from hf_chat_templates.template.engines import llamacpp

    (engine,) = engine_profiles("llama.cpp")
    if engine.unavailable():
        pytest.skip(engine.unavailable())
    clock = datetime.datetime(2024, 7, 26)
    here = engine.render_all(GOOD, _jobs(), clock=clock)
    for command in (["/nonexistent/python"], ["false"], [sys.executable, "-c", "print('{}')"]):
        monkeypatch.setattr(llamacpp, "_worker_command", lambda command=command: command)
        assert engine.start_all(GOOD, _jobs(), clock=clock)() == here


def test_a_worker_begun_early_is_the_one_handed_the_request_and_one_never_asked_is_ended() -> None:
    import os
    import sys

    from hf_chat_templates.template.engines import json_worker

    echo = [sys.executable, "-c", "import json, os, sys; print(json.dumps([os.getpid(), sys.stdin.read()]))"]
    json_worker.prestart(echo)
    json_worker.prestart(echo)  # one at a time: the second is not begun
    (early,) = [p for key, p in json_worker._IDLE.items() if list(key) == echo]
    assert json_worker.start(echo, "request", 60)() == [early.pid, "request"]
    assert json_worker.start(echo, "again", 60)()[1] == "again"  # none waiting: begun on the spot
    json_worker.prestart(echo)
    (unasked,) = json_worker._IDLE.values()
    json_worker.close_idle()
    assert not json_worker._IDLE and unasked.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(unasked.pid, 0)


def test_llama_cpp_facts_come_from_its_worker_without_loading_the_engine_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hf_chat_templates.template.engines import llamacpp

    engine = LlamaCppEngine()
    if engine.unavailable():
        pytest.skip(engine.unavailable())
    loaded = (engine.version, engine.fixed_clock)
    monkeypatch.setattr(llamacpp, "_REPORTED", {})
    monkeypatch.setattr(llamacpp, "_wasm_engine", None)  # any use of the engine here fails
    rendered = engine.start_all(GOOD, _jobs(), clock=datetime.datetime(2024, 7, 26))()
    assert all(r.ok for r in rendered)
    assert (engine.version, engine.fixed_clock) == loaded and engine.unavailable() is None


def test_verify_begins_each_worker_once_before_the_tokenizer_loads(
    installed_variants: dict[tuple[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The llama.cpp and official-renderer workers are begun before the tokenizer loads and are the ones asked;
    the report is the same as when each is begun when asked."""
    from hf_chat_templates.template.engines import json_worker
    from hf_chat_templates.verification import runner

    folder = installed_variants[("llama3.2-pythonic", "corrected")]
    only = ["engine-parity", "reference-parity"]
    with monkeypatch.context() as late:
        late.setattr(runner, "_prestart", lambda *args: None)
        unprimed = runner.verify(folder, only=only, engines="llama.cpp")
    report, begun = verify_recording_workers(monkeypatch, folder, only=only, engines="llama.cpp")
    assert sorted(begun) == sorted([("llama3.2-pythonic", False), (llamacpp_worker_path(), False)])
    assert [(r.id, r.severity, r.message) for r in report.checks] == [
        (r.id, r.severity, r.message) for r in unprimed.checks
    ]
    assert not json_worker._IDLE


def llamacpp_worker_path() -> str:
    from hf_chat_templates.template.engines import llamacpp

    return llamacpp._worker_command()[-1]


def test_workers_begun_early_are_ended_when_the_folder_fails_to_load(
    installed_variants: dict[tuple[str, str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from hf_chat_templates.errors import TokenizerFolderError, UsageError
    from hf_chat_templates.template.engines import json_worker
    from hf_chat_templates.verification import runner

    folder = tmp_path / "tok"
    shutil.copytree(installed_variants[("llama3.2-pythonic", "corrected")], folder)
    (folder / "tokenizer.json").write_text("{ not json")
    begun: list[str] = []
    popen = json_worker._popen
    monkeypatch.setattr(json_worker, "_popen", lambda command: begun.append(command[-1]) or popen(command))
    with pytest.raises(UsageError, match="unknown check"):  # refused before anything begins
        runner.verify(folder, only=["engine-parity", "no-such-check"])
    assert begun == []
    with pytest.raises(TokenizerFolderError, match="invalid JSON"):
        runner.verify(folder, engines="llama.cpp")
    assert sorted(begun) == sorted(["llama3.2-pythonic", llamacpp_worker_path()])  # begun, then ended
    assert not json_worker._IDLE
