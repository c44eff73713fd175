"""The one writer: a folder is staged beside its output and renamed into place; what it replaces is kept; a killed
run's staging folder is swept by the next write, a running one's never is; a file is written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hf_chat_templates.errors import OutputExistsError, TokenizerFolderError
from hf_chat_templates.outputs import STAGING_MARK, staged_folder, write_file

# A process id above Linux's largest (4194304): no process has it.
DEAD_PID = 999_999_999


def test_a_staged_folder_is_published_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_folder(out, force=False) as staging:
        (staging.path / "a.txt").write_text("a")
        assert not out.exists() and staging.path.parent == tmp_path
        assert staging.path.name.startswith(f".out{STAGING_MARK}{os.getpid()}-")
    assert (out / "a.txt").read_text() == "a" and staging.replaced_to is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_error_publishes_nothing_and_leaves_no_staging(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), staged_folder(out, force=False) as staging:
        (staging.path / "a.txt").write_text("a")
        raise RuntimeError("killed half way")
    assert list(tmp_path.iterdir()) == []


def test_discard_publishes_nothing(tmp_path: Path) -> None:
    with staged_folder(tmp_path / "out", force=False) as staging:
        (staging.path / "a.txt").write_text("a")
        staging.discard()
    assert list(tmp_path.iterdir()) == []


def test_replacing_keeps_what_it_replaces(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    with pytest.raises(OutputExistsError) as refused, staged_folder(out, force=False):
        pass
    assert refused.value.parameter == "output" and (out / "mine.txt").read_text() == "mine"
    backups = []
    for text in ("first", "second"):
        with staged_folder(out, force=True) as staging:
            (staging.path / "new.txt").write_text(text)
        assert staging.replaced_to is not None
        backups.append(staging.replaced_to)
    assert (backups[0] / "mine.txt").read_text() == "mine" and (backups[1] / "new.txt").read_text() == "first"
    assert backups[0].name.startswith("out.replaced-") and backups[0] != backups[1]
    assert (out / "new.txt").read_text() == "second"


def test_only_a_dead_runs_staging_is_swept(tmp_path: Path) -> None:
    dead = tmp_path / f".out{STAGING_MARK}{DEAD_PID}-abc"
    running = tmp_path / f".out{STAGING_MARK}{os.getppid()}-def"  # the process that started this test: alive
    other = tmp_path / f".other{STAGING_MARK}{DEAD_PID}-ghi"  # another output's: not this write's business
    for folder in (dead, running, other):
        folder.mkdir()
        (folder / "half.txt").write_text("half")
    with staged_folder(tmp_path / "out", force=False) as staging:
        (staging.path / "a.txt").write_text("a")
    assert not dead.exists() and running.exists() and other.exists()


def test_an_unwritable_place_names_what_to_do(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with (
        pytest.raises(TokenizerFolderError, match="cannot write the output folder here") as err,
        staged_folder(blocker / "out", force=False, where_hint="set HF_CHAT_TEMPLATES_CACHE"),
    ):
        pass
    assert err.value.hint == "set HF_CHAT_TEMPLATES_CACHE"


def test_write_file_is_whole_or_nothing(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.html"
    write_file(target, "<html>é</html>")
    assert target.read_text(encoding="utf-8") == "<html>é</html>"
    write_file(target, b"second")
    assert target.read_bytes() == b"second" and sorted(p.name for p in target.parent.iterdir()) == ["report.html"]
    with pytest.raises(OutputExistsError, match="is a folder"):
        write_file(tmp_path, "x")
