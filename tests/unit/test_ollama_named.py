"""Ollama's template detection for an imported GGUF (`ollama_named`, a port of Ollama's `template.Named`): the
nearest index entry within 100 edits, the first of equals; and `verify FILE.gguf` comparing the Go template Ollama
would pick, named in each finding, with the Modelfile to write as the fix."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.writing import write_gguf
from hf_chat_templates.template.engines.ollama import go_command
from hf_chat_templates.template.engines.ollama_named import (
    DEFAULT_TEMPLATE,
    LIMIT,
    TEMPLATES,
    distance_within,
    index,
    ollama_pick,
)

from ..helpers import chatml_folder, run

needs_go = pytest.mark.skipif(go_command() is None, reason="the ollama profile needs go: pip install -e '.[ollama]'")


def _levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def test_the_banded_distance_is_levenshteins_within_the_limit() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = "".join(rng.choice("ab{%é") for _ in range(rng.randint(0, 25)))
        b = "".join(rng.choice("ab{%é") for _ in range(rng.randint(0, 25)))
        exact = _levenshtein(a, b)
        for limit in (0, 2, 7, 30):
            assert distance_within(a, b, limit) == (exact if exact <= limit else None), (a, b, limit)


def test_each_index_entry_picks_the_first_of_its_text() -> None:
    first: dict[str, str] = {}
    for name, jinja in index():
        first.setdefault(jinja, name)
        pick = ollama_pick(jinja)
        assert (pick.name, pick.distance) == (first[jinja], 0)
        assert pick.template == (TEMPLATES / f"{pick.name}.gotmpl").read_text(encoding="utf-8").replace("\r\n", "\n")


def test_a_near_template_picks_the_entry_and_a_far_one_the_default() -> None:
    name, jinja = index()[0]
    near = jinja.replace("<|im_end|>", "<|im_stop|>", 1) + "  "
    pick = ollama_pick(near)
    assert pick.name == name and pick.distance == _levenshtein(near, jinja)
    assert pick.stops == tuple(json.loads((TEMPLATES / f"{name}.json").read_text())["stop"])
    assert "its `chatml` template" in pick.says()
    far = ollama_pick("{{ messages }}" * 40)
    assert (far.name, far.template, far.distance) == (None, DEFAULT_TEMPLATE, None)
    assert f"within {LIMIT} edits" in far.says()
    assert ollama_pick(None).name is None and ollama_pick("").name is None


def test_the_stored_templates_are_ollamas_with_its_license() -> None:
    assert (
        "MIT License" in (TEMPLATES / "LICENSE").read_text()
        and "Copyright (c) Ollama" in (TEMPLATES / "LICENSE").read_text()
    )
    assert "fb30760996871fa9460115c753afd2c60d4ab0f7" in (TEMPLATES / "README.md").read_text()
    assert len(index()) == 37 and all((TEMPLATES / f"{name}.gotmpl").is_file() for name, _ in index())


def _chatml() -> str:
    """The index's plain ChatML entry: no BOS, add_generation_prompt asked as transformers passes it."""
    return next(j for n, j in index() if n == "chatml" and j.startswith("{% for message in messages %}{{'<|im_start"))


@pytest.fixture(scope="module")
def toy_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ollama-gguf")
    return export_vocab_gguf(chatml_folder(root / "tok"), root / "toy.gguf", pre="gpt-2")


def _parity(capsys: pytest.CaptureFixture[str], gguf: Path, *extra: str) -> dict[str, Any]:
    code, stdout, err = run(
        capsys, "verify", str(gguf), "--only", "engine-parity", "--engines", "ollama", "--json", *extra
    )
    assert code in (0, 1), err
    (check,) = json.loads(stdout)["checks"]
    return dict(check)


@needs_go
def test_verify_a_gguf_compares_the_template_ollama_picks(
    capsys: pytest.CaptureFixture[str], toy_gguf: Path, tmp_path: Path
) -> None:
    chatml = _chatml()
    gguf = write_gguf(toy_gguf, tmp_path / "chatml.gguf", chat_template=chatml).output
    check = _parity(capsys, gguf)
    ollama = check["detail"]["engines"]["ollama"]
    assert ollama["version"].endswith("its `chatml` template as Ollama picks for this GGUF")
    assert check["status"] == "warn" and "export ollama" in check["hint"]
    assert check["message"].startswith("Ollama would render this GGUF with its `chatml` template")
    examples = check["detail"]["examples"]
    assert all(e["message"].startswith("Ollama would render this GGUF with its `chatml` template") for e in examples)
    assert {e["severity"] for e in examples} <= {"warning", "info"}
    # the probes the pick renders as the Jinja template does (a conversation open for the reply) are no finding
    assert ollama["identical"] > 0 and len(ollama["differs"]) == ollama["renders"] - ollama["identical"]
    assert {e["probe"] for e in examples} <= set(ollama["differs"])


@needs_go
def test_verify_a_gguf_ollama_matches_nothing_with_names_the_default(
    capsys: pytest.CaptureFixture[str], toy_gguf: Path
) -> None:
    check = _parity(capsys, toy_gguf)
    assert check["status"] == "warn" and "export ollama" in check["hint"]
    assert check["message"].startswith(f"Ollama would render this GGUF with its default template `{DEFAULT_TEMPLATE}`")


@needs_go
def test_the_fix_export_ollama_from_the_gguf_is_compared_instead_of_the_pick(
    capsys: pytest.CaptureFixture[str], toy_gguf: Path, tmp_path: Path
) -> None:
    chatml = _chatml()
    gguf = write_gguf(toy_gguf, tmp_path / "chatml.gguf", chat_template=chatml).output
    modelfile = tmp_path / "Modelfile"
    code, _, err = run(capsys, "export", "ollama", str(gguf), "--output", str(modelfile))
    assert code == 0, err
    assert modelfile.read_text(encoding="utf-8").startswith(f"FROM {gguf}\n")
    check = _parity(capsys, gguf, "--ollama-modelfile", str(modelfile))
    assert check["status"] == "pass", check["message"]
    assert "picks for this GGUF" not in check["detail"]["engines"]["ollama"]["version"]


@needs_go
@pytest.mark.parametrize("adds_bos", [True, False])
def test_the_bos_ollamas_runner_adds_is_where_the_template_writes_it(
    capsys: pytest.CaptureFixture[str], toy_gguf: Path, tmp_path: Path, adds_bos: bool
) -> None:
    """A template that writes {{ bos_token }} first, picked as Ollama's BOS-less chatml: the same text the model
    sees when the GGUF's add_bos_token makes the runner add it, a difference at char 0 when it does not."""
    with_bos = next(j for n, j in index() if n == "chatml" and j.startswith("{{bos_token}}"))
    gguf = write_gguf(toy_gguf, tmp_path / "bos.gguf", chat_template=with_bos, add_bos_token=adds_bos).output
    ollama = _parity(capsys, gguf)["detail"]["engines"]["ollama"]
    assert ("after the BOS <s> its runner adds" in ollama["version"]) is adds_bos
    assert ("generation-prompt" in ollama["differs"]) is not adds_bos
