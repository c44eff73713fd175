"""`compile_template` keeps a template's compiled code in the cache folder and reads it again: the same renders,
no second compile; a record per environment (plain, shapes); a damaged record, a template that does not compile,
or a cache that cannot be written all mean compiling as before."""

from __future__ import annotations

import marshal
from pathlib import Path

import jinja2
import pytest

from hf_chat_templates import _compat
from hf_chat_templates.tokenizer.cache_folder import keep, read_kept
from hf_chat_templates.training import loading

from ..helpers import spy

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% if m.role == 'assistant' %}{% generation %}"
    "{{ '<end>' }}{% endgeneration %}{% endif %}\n{% endfor %}{{ tools | tojson(indent=2) if tools }}"
    "{{ {'k': 1} | tojson }}"  # a filter on a constant: run when compiling
)
MESSAGES = [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yes"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def _render(template: jinja2.Template) -> str:
    return template.render(messages=MESSAGES, tools=TOOLS)


def _of_sources(compiles: list[tuple[object, ...]]) -> int:
    """The compiles of a template's source (transformers' environment is made once, with an empty template)."""
    return sum(1 for call in compiles if call[1])


def _records(cache: Path) -> list[Path]:
    folder = cache / "compiled-templates"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_compiled_template_is_read_again_and_renders_as_transformers_does(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _render(_compat.compile_template(TEMPLATE))
    compiles = spy(monkeypatch, jinja2.Environment, "compile")
    assert _render(loading.compile_template(TEMPLATE)) == expected and _of_sources(compiles) == 1
    assert _render(loading.compile_template(TEMPLATE)) == expected and _of_sources(compiles) == 1  # read, not compiled
    assert len(_records(cache)) == 1
    shaped = _render(loading.compile_template(TEMPLATE, shapes=True))  # another environment: a record of its own
    assert _of_sources(compiles) == 2 and len(_records(cache)) == 2
    assert _render(loading.compile_template(TEMPLATE, shapes=True)) == shaped == expected
    assert _of_sources(compiles) == 2
    loading.compile_template(TEMPLATE + " ")  # another source
    assert _of_sources(compiles) == 3 and len(_records(cache)) == 3


@pytest.mark.parametrize(
    ("damage", "written_by_keep"),
    [
        (b"", False),
        (b"not marshal", True),
        (marshal.dumps(1), True),
        (marshal.dumps(compile("x = 1", "<template>", "exec")), True),  # code, not a template's
        (marshal.dumps(compile("x = 1", "<template>", "exec")), False),  # not what was written
    ],
    ids=["empty", "garbage", "not-code", "not-a-template", "changed-by-hand"],
)
def test_a_damaged_record_is_compiled_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes, written_by_keep: bool
) -> None:
    expected = _render(loading.compile_template(TEMPLATE))
    (record,) = _records(cache)
    keep(record, damage) if written_by_keep else record.write_bytes(damage)
    compiles = spy(monkeypatch, jinja2.Environment, "compile")
    assert _render(loading.compile_template(TEMPLATE)) == expected and _of_sources(compiles) == 1
    assert "root" in marshal.loads(read_kept(record) or b"").co_names  # mended: a template's code again


def test_a_template_that_does_not_compile_fails_each_time_and_keeps_nothing(cache: Path) -> None:
    for _ in range(2):
        with pytest.raises(jinja2.TemplateSyntaxError):
            loading.compile_template("{% for m in messages %}")
        with pytest.raises(jinja2.TemplateAssertionError, match="no_such_filter"):
            loading.compile_template("{{ x | no_such_filter }}")
    assert _records(cache) == []


def test_the_key_holds_the_environments_filters(cache: Path) -> None:
    environment = _compat.compile_template("").environment.overlay()
    before = loading._code_record(environment, TEMPLATE)
    environment.filters = {**environment.filters, "extra": str}
    assert loading._code_record(environment, TEMPLATE) != before


def test_a_cache_that_cannot_be_written_compiles_each_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "file"))
    expected = _render(_compat.compile_template(TEMPLATE))
    compiles = spy(monkeypatch, jinja2.Environment, "compile")
    assert _render(loading.compile_template(TEMPLATE)) == _render(loading.compile_template(TEMPLATE)) == expected
    assert _of_sources(compiles) == 2
