"""`compile_template` never runs code from the cache folder: a template is compiled from its source once per process
(per environment: plain, shapes) and kept in memory only. A record planted where compiled code was once kept, even
one that `read_kept` trusts, is never loaded; a new process compiles again; nothing is written to the folder."""

from __future__ import annotations

import hashlib
import marshal
import uuid
from pathlib import Path
from typing import Any

import jinja2
import pytest

from hf_chat_templates import _compat
from hf_chat_templates.tokenizer.cache_folder import keep, read_kept
from hf_chat_templates.training import loading

from ..helpers import snapshot, spy

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% if m.role == 'assistant' %}{% generation %}"
    "{{ '<end>' }}{% endgeneration %}{% endif %}\n{% endfor %}{{ tools | tojson(indent=2) if tools }}"
    "{{ {'k': 1} | tojson }}"  # a filter on a constant: run when compiling
)
MESSAGES = [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yes"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def _fresh(template: str = TEMPLATE) -> str:
    """`template` with a comment of its own: a source this process has not compiled yet (the memo lasts a process)."""
    return f"{{# {uuid.uuid4().hex} #}}{template}"


def _render(template: jinja2.Template) -> str:
    return template.render(messages=MESSAGES, tools=TOOLS)


def _of_sources(compiles: list[tuple[object, ...]]) -> int:
    """The compiles of a template's source (transformers' environment is made once, with an empty template)."""
    return sum(1 for call in compiles if call[1])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _plant(cache: Path, source: str, flag: Path) -> list[Path]:
    """Records a hostile writer could leave where compiled template code was kept (`compiled-templates/KEY.marshal`),
    each with a sha256 that `read_kept` accepts: code that writes `flag` and raises, and a template's code that
    renders something else."""
    hostile = compile(
        f"import pathlib\npathlib.Path({str(flag)!r}).write_text('ran')\nraise RuntimeError('planted code ran')\n",
        "<template>",
        "exec",
    )
    impostor = _compat.compile_template("").environment.overlay().compile("PLANTED")
    records = []
    for i, code in enumerate((hostile, impostor)):
        for key in (hashlib.sha256(source.encode()).hexdigest(), f"{i:064x}"):
            record = cache / "compiled-templates" / f"{key}-{i}.marshal"
            keep(record, marshal.dumps(code))
            assert read_kept(record) is not None  # a record the old reader would have trusted
            records.append(record)
    return records


def test_a_record_planted_in_the_cache_folder_is_never_run(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _fresh()
    flag = tmp_path / "planted-code-ran"
    _plant(cache, source, flag)
    before = snapshot(cache)
    compiled: set[int] = set()  # the code objects jinja2 compiled in this process
    foreign: list[Any] = []  # code a template was made of that was not (kept, not raised: a reader may swallow it)
    real_compile, real_from_code = jinja2.Environment.compile, jinja2.Template.from_code

    def compile_(self: jinja2.Environment, *args: Any, **kwargs: Any) -> Any:
        code = real_compile(self, *args, **kwargs)
        compiled.add(id(code))
        return code

    def from_code(environment: Any, code: Any, *args: Any) -> Any:
        if id(code) not in compiled:
            foreign.append(code)
        return real_from_code(environment, code, *args)

    monkeypatch.setattr(jinja2.Environment, "compile", compile_)
    monkeypatch.setattr(jinja2.Template, "from_code", from_code)
    expected = _render(_compat.compile_template(TEMPLATE))
    for memo in ("this process", "a new process"):
        if memo == "a new process":  # starts with nothing in memory, and the same cache folder
            loading.compile_template.cache_clear()
        for shapes in (False, True, False, True):
            assert _render(loading.compile_template(source, shapes=shapes)) == expected, memo
    assert foreign == [] and not flag.exists()
    assert snapshot(cache) == before  # nothing kept, nothing mended


def test_a_template_is_compiled_once_per_process_and_environment(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _fresh()
    expected = _render(_compat.compile_template(TEMPLATE))
    compiles = spy(monkeypatch, jinja2.Environment, "compile")
    assert _render(loading.compile_template(source)) == expected and _of_sources(compiles) == 1
    assert loading.compile_template(source) is loading.compile_template(source) and _of_sources(compiles) == 1
    shaped = loading.compile_template(source, shapes=True)  # another environment: compiled for it
    assert _render(shaped) == expected and _of_sources(compiles) == 2
    assert loading.compile_template(source, shapes=True) is shaped and _of_sources(compiles) == 2
    loading.compile_template(source + " ")  # another source
    assert _of_sources(compiles) == 3
    assert not cache.exists()


def test_a_template_that_does_not_compile_fails_each_time_and_keeps_nothing(cache: Path) -> None:
    for _ in range(2):
        with pytest.raises(jinja2.TemplateSyntaxError):
            loading.compile_template("{% for m in messages %}")
        with pytest.raises(jinja2.TemplateAssertionError, match="no_such_filter"):
            loading.compile_template("{{ x | no_such_filter }}")
    assert not cache.exists()
