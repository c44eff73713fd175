"""Published chat templates (tests/data/templates) on the real Llama 3 vocabulary: the tool, with nothing declared,
on what models actually ship.

For each template of the corpus:

1. `install --template` with nothing declared onto the bare base tokenizer registers, as one special id, every
   special token of the model that the template writes (tool-call tags as one plain id, as the plan says);
2. on the bare base tokenizer (the template file and nothing else), `control-tokens-atomic` fails and names one of
   the model's special tokens;
3. on the folder as the model ships it, every failing check is one model.toml lists under `known_failures` (any
   other is a false alarm), and the stop tokens verify uses include the model's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.verification.runner import verify_with_context

from ..helpers import corpus_manifest, corpus_names, corpus_templates, model_folder, run

NAMES = corpus_names()


Build = Callable[[str, bool], Path]


@pytest.fixture(scope="module")
def build(llama3_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Build:
    """`build(name, registered)`: the template's folder on the Llama 3 base, made once per module."""
    root = tmp_path_factory.mktemp("corpus")
    made: dict[tuple[str, bool], Path] = {}

    def get(name: str, registered: bool) -> Path:
        if (name, registered) not in made:
            out = root / f"{name}-{'shipped' if registered else 'bare'}"
            made[(name, registered)] = model_folder(name, llama3_base, out, registered=registered)
        return made[(name, registered)]

    return get


def written_specials(name: str) -> list[str]:
    """The model's special tokens that its templates write as literals."""
    texts = [path.read_text(encoding="utf-8") for path in corpus_templates(name).values()]
    return [t for t in corpus_manifest(name)["special_tokens"] if any(t in text for text in texts)]


def is_special(tokenizer: Any, token: str) -> bool:
    ids = tokenizer.encode(token, add_special_tokens=False)
    entry = tokenizer.added_tokens_decoder.get(ids[0]) if len(ids) == 1 else None
    return entry is not None and entry.content == token and entry.special


def kwargs_of(name: str) -> dict[str, Any] | None:
    return corpus_manifest(name).get("kwargs") or None


@pytest.mark.parametrize("name", NAMES)
def test_install_with_nothing_declared_registers_the_special_tokens(
    name: str, build: Build, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoTokenizer

    bare = build(name, False)
    templates = corpus_templates(name)
    options = [
        arg
        for template, path in templates.items()
        for arg in ("--template", str(path) if template == "default" else f"{template}={path}")
    ]
    out = tmp_path / "installed"
    code, stdout, stderr = run(capsys, "install", "--tokenizer", str(bare), "--output", str(out), *options)
    assert code == 0, f"install refused {name}:\n{stdout}\n{stderr}"
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    # Tool-call and reasoning tags are markup: install adds them as plain tokens (one id, kept by decoding), which
    # the plan says; every other special token of the model must be one special id.
    plain = [line for line in stdout.splitlines() if "added as a plain token" in line]
    markup = [t for t in written_specials(name) if any(f"{t} = id" in line for line in plain)]
    gaps = corpus_manifest(name).get("install_gaps", {})
    missing = [t for t in written_specials(name) if not is_special(tokenizer, t) and t not in markup]
    assert set(missing) <= set(gaps), f"{name}: not one special id after install: {missing}\n{stdout}"
    split = [t for t in markup if len(tokenizer.encode(t, add_special_tokens=False)) != 1]
    assert not split, f"{name}: markup not one id after install: {split}\n{stdout}"


@pytest.mark.parametrize("name", NAMES)
def test_bare_tokenizer_fails_control_tokens_atomic(name: str, build: Build) -> None:
    from transformers import AutoTokenizer

    bare = build(name, False)
    specials = written_specials(name)
    base = AutoTokenizer.from_pretrained(str(bare))
    if all(is_special(base, t) for t in specials):
        pytest.skip(f"the base tokenizer already registers every special token {name} writes")
    report, _ = verify_with_context(bare, TemplateChoice(kwargs=kwargs_of(name)), only=["control-tokens-atomic"])
    result = report.check("control-tokens-atomic")
    assert result.status == "fail", f"{name}: unregistered tokens went unnoticed: {result.message}"
    named = " ".join([result.message, *(e["message"] for e in result.detail.get("examples", []))])
    assert any(t in named for t in specials), f"{name}: none of {specials} named in: {named}"


@pytest.mark.parametrize("name", NAMES)
def test_shipped_folder_fails_only_known_checks(name: str, build: Build) -> None:
    manifest = corpus_manifest(name)
    shipped = build(name, True)
    report, ctx = verify_with_context(shipped, TemplateChoice(kwargs=kwargs_of(name)))
    known = manifest.get("known_failures", {})
    false_alarms = [f"{c.id}: {c.message}" for c in report.checks if c.status == "fail" and c.id not in known]
    missing_stops = [t for t in manifest["stop_tokens"] if t not in ctx.stop_tokens]
    assert not false_alarms, f"{name}: failures model.toml does not list:\n" + "\n".join(false_alarms)
    assert not missing_stops, f"{name}: verify stops on {ctx.stop_tokens}, not on {missing_stops}"
