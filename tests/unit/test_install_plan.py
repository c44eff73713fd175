"""Regression: a plan made with force=True keeps it. `apply_install(plan_install(..., force=True))` on a non-empty
output used to raise OutputExistsError because the plan did not record force; it now replaces the output and keeps
the old folder beside it as `OUT.replaced-*`."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_chat_templates import apply_install, plan_install
from hf_chat_templates.errors import OutputExistsError

from ..helpers import snapshot

FAMILY = "llama3.2-pythonic"


@pytest.fixture
def source(toy_tokenizer: Path) -> Path:
    """tmp_path/src: a copy of the toy tokenizer (helpers.build_toy_tokenizer, trained once per session)."""
    return toy_tokenizer


@pytest.fixture
def occupied(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A non-empty output folder, with a nested file and bytes that are not text."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "notes.txt").write_text("keep me\n")
    (out / "sub" / "blob.bin").write_bytes(bytes(range(256)))
    return out, snapshot(out)


def test_forced_plan_replaces_a_non_empty_output(
    source: Path, occupied: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    out, before = occupied
    plan = plan_install(FAMILY, source, out, force=True)
    assert plan.force is True
    result = apply_install(plan)
    assert result.already_installed is False
    # the new folder is in place
    assert (out / "chat_template.jinja").read_text(encoding="utf-8") == plan.expected_template
    assert not (out / "notes.txt").exists()
    # the old one is kept beside it, byte for byte
    assert result.replaced_to is not None
    assert result.replaced_to.parent == out.parent and result.replaced_to.name.startswith("out.replaced-")
    assert snapshot(result.replaced_to) == before
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("out.replaced-")]
    assert kept == [result.replaced_to]
    # and nothing else is left next to it (no staging folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["src", "out", result.replaced_to.name])


def test_unforced_plan_refuses_a_non_empty_output(source: Path, occupied: tuple[Path, dict[str, bytes]]) -> None:
    out, before = occupied
    with pytest.raises(OutputExistsError, match=r"out: exists and is not empty$") as caught:
        plan_install(FAMILY, source, out)
    assert caught.value.hint == "choose another output, or pass force to replace it (the old folder is kept beside it)"
    assert snapshot(out) == before


def test_apply_force_false_overrides_a_forced_plan(
    source: Path, occupied: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    out, before = occupied
    plan = plan_install(FAMILY, source, out, force=True)
    assert plan.force is True
    with pytest.raises(OutputExistsError) as info:
        apply_install(plan, force=False)
    assert info.value.path == out
    assert snapshot(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("out.replaced-")]


def test_plan_force_defaults_to_false(source: Path, tmp_path: Path) -> None:
    plan = plan_install(FAMILY, source, tmp_path / "fresh")
    assert plan.force is False
    result = apply_install(plan)
    assert result.replaced_to is None and (tmp_path / "fresh" / "tokenizer.json").is_file()
