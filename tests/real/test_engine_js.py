"""transformers.js's profile: real templates rendered by @huggingface/jinja in node, compared with transformers on
the real base tokenizers.

The package comes from the package's js folder, where tests/conftest.py installs it with npm on first use (the
command `TransformersJsEngine().unavailable()` prints). When it is not there and npm is, the module installs the
pinned version into a temporary folder first; without node, or when npm cannot install it, every test that needs
it is skipped with that reason.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import base_tokenizer, list_families
from hf_chat_templates.conversations.probes import id_format_for
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.template.engines.base import RenderJob
from hf_chat_templates.template.engines.js import TransformersJsEngine, install_js_engine
from hf_chat_templates.template.limits import RenderLimits
from hf_chat_templates.template.rendering import Renderer, frozen_clock

CLOCK = _dt.datetime(2024, 7, 26, 10, 30)
FAMILIES = {family.name: family for family in list_families()}


@pytest.fixture(scope="module")
def js_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the pinned @huggingface/jinja: the cache folder when it has it, else a fresh npm install."""
    engine = TransformersJsEngine()
    if shutil.which("node") is None:
        pytest.skip(f"transformers.js profile: {engine.unavailable()}")
    if engine.unavailable() is None:
        return engine.directory
    if shutil.which("npm") is None:
        pytest.skip(f"transformers.js profile: {engine.unavailable()} (and npm is not on PATH to install it)")
    try:
        return install_js_engine(tmp_path_factory.mktemp("js"), timeout=240)
    except RuntimeError as err:
        pytest.skip(f"transformers.js profile: {engine.unavailable()}; installing it failed: {err}")


@pytest.fixture(scope="module")
def js(js_dir: Path) -> TransformersJsEngine:
    return TransformersJsEngine(js_dir)


def renderer_for(family: str, variant: str) -> Renderer:
    from transformers import AutoTokenizer

    var = FAMILIES[family].variants[variant]
    tokenizer = AutoTokenizer.from_pretrained(str(base_tokenizer(FAMILIES[family].base_tokenizer)))
    return Renderer(tokenizer, var.template, var.kwarg_defaults)


def compare(js: TransformersJsEngine, renderer: Renderer) -> dict[str, tuple[Any, Any]]:
    """Every probe transformers renders: (transformers' outcome, transformers.js's), by probe id."""
    probes = [
        p
        for p in build_probes(id_format_for(renderer.template))
        if not p.continue_final_message and renderer.render(p.message_list(), p.tool_list()).ok
    ]
    variables = {**renderer.template_variables(), **renderer.kwargs}
    jobs = [RenderJob(p.message_list(), p.tool_list(), p.add_generation_prompt, variables) for p in probes]
    outs = js.render_all(renderer.template, jobs, clock=CLOCK)
    with frozen_clock(CLOCK):
        ours = [
            renderer.render(p.message_list(), p.tool_list(), add_generation_prompt=p.add_generation_prompt, cache=False)
            for p in probes
        ]
    return {p.id: (a, b) for p, a, b in zip(probes, ours, outs)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_bundled_corrected_template_renders_in_transformers_js_as_in_transformers(
    js: TransformersJsEngine, family: str
) -> None:
    outcomes = compare(js, renderer_for(family, "corrected"))
    assert len(outcomes) > 30
    wrong = {
        pid: (ours.text, theirs.text or theirs.error)
        for pid, (ours, theirs) in outcomes.items()
        if ours.text != theirs.text
    }
    assert wrong == {}


@pytest.mark.parametrize(
    ("family", "probe", "error"),
    [
        ("llama3.2-pythonic", "tool-call", "Error: Unknown StringValue filter: format"),
        ("gemma3-tools", "tools-declared", "Error: `map` expressions without `attribute` set are not currently"),
    ],
)
def test_an_upstream_template_fails_in_transformers_js_naming_what_it_lacks(
    js: TransformersJsEngine, family: str, probe: str, error: str
) -> None:
    ours, theirs = compare(js, renderer_for(family, "upstream"))[probe]
    assert ours.ok and not theirs.ok and not theirs.refused
    assert theirs.error.startswith(error)


def test_none_values_reach_the_template_as_null_and_the_note_says_so(js: TransformersJsEngine) -> None:
    template = "{% for m in messages %}{{ 'none' if m.content is none else m.content }}|{% endfor %}"
    job = RenderJob([{"role": "assistant", "content": None}, {"role": "user", "content": "Hi"}], None, False, {})
    (out,) = js.render_all(template, [job], clock=CLOCK)
    assert out.text == "none|Hi|"  # transformers drops the key: "|Hi|"
    assert "messages[0].content is null (transformers drops the key)" in out.note


def test_refusals_parse_errors_and_the_clock(js: TransformersJsEngine) -> None:
    job = RenderJob([], None, True, {"bos_token": "<s>"})
    refused, dated = js.render_all(
        "{% if add_generation_prompt %}{{ raise_exception('no prompt') }}{% endif %}",
        [job, RenderJob([], None, False, {})],
        clock=CLOCK,
    )
    assert refused.refused and refused.error == "Error: no prompt"
    assert dated.text == ""
    (clock,) = js.render_all("{{ bos_token }}{{ strftime_now('%d %B %Y %H:%M') }}", [job], clock=CLOCK)
    assert clock.text == "<s>26 July 2024 10:30"
    # a template the library cannot parse fails every job with the library's own error
    broken = js.render_all("{% for m in messages %}", [job, job], clock=CLOCK)
    assert [b.ok for b in broken] == [False, False] and broken[0].error == broken[1].error
    assert broken[0].error == "TypeError: Cannot read properties of undefined (reading 'type')"


def test_a_clock_directive_the_library_lacks_is_written_as_is_and_the_note_says_so(js: TransformersJsEngine) -> None:
    (out,) = js.render_all("{{ strftime_now('%A %d') }}", [RenderJob([], None, False, {})], clock=CLOCK)
    assert out.text == "%A 26"  # transformers writes "Friday 26"
    assert "strftime_now knows only" in out.note and "writes %A as it is" in out.note


def test_a_render_that_never_ends_is_stopped_and_the_jobs_after_it_fail_with_the_limit(js_dir: Path) -> None:
    engine = TransformersJsEngine(js_dir, RenderLimits(seconds=0.5), startup_seconds=4)
    template = (
        "{% if messages %}{% for i in range(10 ** 8) %}{% for j in range(100) %}{% endfor %}{% endfor %}{% endif %}ok"
    )
    empty, looping = RenderJob([], None, False, {}), RenderJob([{"role": "user", "content": "Hi"}], None, False, {})
    done, stuck, after = engine.render_all(template, [empty, looping, empty], clock=CLOCK)
    assert done.text == "ok"
    assert not stuck.ok and "time limit of 1 s" in (stuck.error or "")
    assert not after.ok and after.error == stuck.error


def test_a_rendering_over_the_size_limit_is_refused(js_dir: Path) -> None:
    engine = TransformersJsEngine(js_dir, RenderLimits(max_chars=5))
    short, long = engine.render_all(
        "{{ x }}", [RenderJob([], None, False, {"x": x}) for x in ("abc", "abcdef")], clock=CLOCK
    )
    assert short.text == "abc"
    assert not long.ok and "6 characters, over the limit of 5" in (long.error or "")


def test_without_the_package_the_profile_says_the_command_and_renders_nothing(tmp_path: Path) -> None:
    engine = TransformersJsEngine(tmp_path / "empty")
    reason = engine.unavailable()
    assert reason is not None and f"npm install --prefix {tmp_path / 'empty'}" in reason
    assert "@huggingface/jinja@0.5.13" in reason
    (out,) = engine.render_all("x", [RenderJob([], None, False, {})], clock=CLOCK)
    assert not out.ok and reason in (out.error or "")
