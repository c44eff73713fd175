"""What a hostile tester found, each fixed and kept fixed: a hostile template costs one finding and about twice
one render's limit, not one wait per probe; two writers of one output never undo each other, and a killed run's
staging is swept; debug output never changes an exit code; options that would be ignored are refused; an
unwritable output is a clear error; an empty template file is refused; a symlink out of the folder is refused by
every command, and a symlinked folder is never silently left out."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.errors import OutputBusyError
from hf_chat_templates.outputs import STAGING_MARK, lock_path, staged_folder
from hf_chat_templates.template.limits import (
    RUN_FACTOR,
    RenderBudget,
    RenderLimitExceeded,
    RenderLimits,
    limited,
    render_run,
)
from hf_chat_templates.template.rendering import Renderer
from hf_chat_templates.tokenizer.folder import read_folder
from hf_chat_templates.verification.context import VerifyContext
from hf_chat_templates.verification.runner import run_checks

from ..helpers import CONVERSATIONS, run, write_jsonl

HOSTILE = Path(__file__).resolve().parent.parent / "hostile"
DEAD_PID = 999_999_999  # above Linux's largest process id: no process has it


@pytest.fixture(scope="module")
def tokenizer(good: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(good))


# ---- 1. a hostile template is stopped for the run after its first limit ---------------------------------------


def test_a_template_that_trips_a_limit_is_stopped_for_the_rest_of_the_run(
    tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_CHAT_TEMPLATES_RENDER_SECONDS", "0.3")
    with render_run():
        ctx = VerifyContext(tokenizer, (HOSTILE / "nested_loops.jinja").read_text())
        (result,) = run_checks(ctx, ["renders"])
        errors = {r.error for r in ctx.rendered.values()}
        again = Renderer(tokenizer, ctx.template)  # another renderer of the same template in the same run
        assert again.budget is ctx.renderer.budget
    assert result.status == "fail" and len(ctx.rendered) > 40
    assert len(errors) == 1 and "time limit" in (errors.pop() or "")
    assert ctx.renderer.budget.seconds < 0.3 * RUN_FACTOR + 0.2  # CPU seconds: one wait, then every render fails fast


def test_renders_just_under_the_limits_are_bounded_by_the_run(tokenizer: Any) -> None:
    limits = RenderLimits(seconds=5, max_chars=1000)
    renderer = Renderer(tokenizer, "{{ 'x' * 900 }}", limits=limits)
    outcomes = [renderer.render([{"role": "user", "content": str(n)}]) for n in range(4)]
    assert [o.ok for o in outcomes] == [True, True, False, False]
    assert "add up to 2,700 characters" in (outcomes[2].error or "") and outcomes[3].error == outcomes[2].error
    budget = RenderBudget(limits, seconds=limits.seconds * RUN_FACTOR - 1e-3)
    with pytest.raises(RenderLimitExceeded, match="together ran past"), limited(budget=budget):
        while True:  # Python code, which the timer interrupts
            pass
    with pytest.raises(RenderLimitExceeded, match="together ran past"), limited(budget=budget):
        pass  # stopped: fails before the block runs


def test_the_time_limit_is_cpu_time_so_a_busy_machine_does_not_trip_it() -> None:
    with limited(RenderLimits(seconds=0.1)):
        time.sleep(0.3)  # a render waiting for the CPU spends no CPU time


# ---- 2 and 3. one writer per output; a killed run's staging is swept -----------------------------------------


def test_a_second_writer_of_one_output_fails_at_once_and_leaves_the_first_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_folder(out, force=False) as first:
        (first.path / "a.txt").write_text("first")
        with (
            pytest.raises(OutputBusyError, match=f"process {os.getpid()} is writing") as busy,
            staged_folder(out, force=True),
        ):
            pass
        assert busy.value.parameter == "output" and first.path.is_dir()
    assert (out / "a.txt").read_text() == "first"
    assert not lock_path(out).exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_two_builds_of_one_base_tokenizer_wait_for_each_other_and_build_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses
    import threading

    from hf_chat_templates.tokenizer import base

    builds: list[int] = []
    started = threading.Event()

    def slow_build(out: Path, add_bos: bool) -> None:
        builds.append(threading.get_ident())
        started.set()
        time.sleep(0.3)  # the second build asks for the lock meanwhile
        (out / "tokenizer.json").write_text("{}")

    spec = dataclasses.replace(base.BASE_TOKENIZERS["llama3"], build=slow_build)
    monkeypatch.setitem(base.BASE_TOKENIZERS, "llama3", spec)
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path))
    results: list[Path | BaseException] = []

    def build() -> None:
        try:
            results.append(base.base_tokenizer("llama3"))
        except BaseException as err:
            results.append(err)

    first = threading.Thread(target=build)
    first.start()
    started.wait(5)
    build()
    first.join()
    assert len(builds) == 1 and len(set(results)) == 1 and isinstance(results[0], Path), results
    assert (results[0] / "tokenizer.json").read_text() == "{}"


def test_a_killed_runs_staging_is_swept_by_the_next_write(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    stale = [tmp_path / f".out{STAGING_MARK}{DEAD_PID}-{n}" for n in ("prepare", "install")]
    for folder in stale:
        folder.mkdir()
        (folder / "data-00000-of-00001.arrow").write_bytes(b"half")
    lock_path(tmp_path / "out").write_text(f"{DEAD_PID}\n")  # a killed run's lock file: not held by anyone
    code, _, err = run(
        capsys,
        "install",
        "--template",
        str(tmp_path / "t.jinja"),
        "--tokenizer",
        str(good),
        "--output",
        str(tmp_path / "out"),
        "--stop-token",
        "<|im_end|>",
    )
    assert code == 2 and "template file not found" in err  # refused before any write: nothing swept yet
    (tmp_path / "t.jinja").write_text(read_folder(good).config_templates()["default"])
    code, _, err = run(
        capsys,
        "install",
        "--template",
        str(tmp_path / "t.jinja"),
        "--tokenizer",
        str(good),
        "--output",
        str(tmp_path / "out"),
        "--stop-token",
        "<|im_end|>",
    )
    assert code == 0, err
    assert not any(f.exists() for f in stale) and not lock_path(tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "out", "t.jinja"]
    assert data.exists()


# ---- 4. debug output is a boolean, and never changes the exit code ---------------------------------------------


@pytest.mark.parametrize(
    ("value", "traceback", "warned"),
    [
        ("1", True, False),
        ("yes", True, False),
        ("0", False, False),
        ("off", False, False),
        ("", False, False),
        ("maybe", False, True),
    ],
)
def test_debug_adds_a_traceback_and_nothing_else(
    value: str,
    traceback: bool,
    warned: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_CHAT_TEMPLATES_DEBUG", value)
    code, _, err = run(
        capsys, "install", "gigachat3", "--tokenizer", str(tmp_path / "missing"), "--output", str(tmp_path / "out")
    )
    assert code == 2 and "no such folder" in err
    assert ("Traceback" in err) == traceback
    assert ("is not a boolean" in err) == warned


# ---- 5. an option that would be ignored is refused ------------------------------------------------------------


def test_options_that_would_be_ignored_are_refused(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATIONS[0]["messages"]))
    cases = [
        (["verify", str(good), "--variant", "upstream"], "--variant picks a bundled family's variant"),
        (
            ["prepare", str(good), "--conversations", str(data), "--output", str(tmp_path / "o"), "--variant", "x"],
            "--variant picks a bundled family's variant",
        ),
        (["view", str(good), "--messages", str(messages), "--variant", "x"], "--variant picks"),
        (["verify", str(good), "--revision", "main"], "--revision only apply to a Hub repo id"),
        (["verify", str(good), "--token", "hf_x"], "--token only apply to a Hub repo id"),
        (
            ["install", "gigachat3", "--tokenizer", str(good), "--output", str(tmp_path / "o"), "--revision", "main"],
            "--revision only apply to a Hub repo id",
        ),
        (
            ["install", "gigachat3", "--tokenizer", str(good), "--output", str(tmp_path / "o"), "--stop-token", "x"],
            "--stop-token and --control-token declare a template file's tokens",
        ),
    ]
    for args, message in cases:
        code, _, err = run(capsys, *args)
        assert code == 2 and message in err and "to fix:" in err, (args, err)
    assert not (tmp_path / "o").exists()


# ---- 6. an output that cannot be written is a clear error -----------------------------------------------------


@pytest.mark.parametrize(
    ("number", "advice"),
    [(errno.EROFS, "read-only"), (errno.ENOSPC, "free some space"), (errno.EACCES, "you can write")],
)
def test_an_unwritable_output_names_the_path_and_what_to_do(
    number: int,
    advice: str,
    good: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> str:
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    code, _, err = run(capsys, "install", "gigachat3", "--tokenizer", str(good), "--output", str(tmp_path / "out"))
    assert code == 2 and "unexpected" not in err and str(tmp_path) in err and advice in err, err
    assert os.strerror(number) in err and not (tmp_path / "out").exists()


# ---- 7. an empty template file is refused ----------------------------------------------------------------------


def test_an_empty_template_file_is_refused(good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jinja"
    empty.write_text("  \n")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    for args in (
        ["prepare", str(good), "--conversations", str(data), "--output", str(tmp_path / "o")],
        ["verify", str(good)],
    ):
        code, _, err = run(capsys, *args, "--template", str(empty))
        assert code == 2 and "the template file is empty" in err, err
    assert not (tmp_path / "o").exists()


# ---- 8. symlinks out of the folder are refused everywhere; symlinked folders are never dropped -----------------


def test_a_template_linked_from_outside_the_folder_is_refused_by_every_command(
    good: Path, tmp_path: Path, capsys
) -> None:
    import shutil

    folder = tmp_path / "tok"
    shutil.copytree(good, folder)
    (tmp_path / "outside.jinja").write_text("{{ 'secret' }}")
    (folder / "chat_template.jinja").symlink_to(tmp_path / "outside.jinja")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATIONS[0]["messages"]))
    commands = [
        ["verify", str(folder)],
        ["verify", str(folder), "--family", "gigachat3"],
        ["view", str(folder), "--messages", str(messages)],
        ["prepare", str(folder), "--conversations", str(data), "--output", str(tmp_path / "o")],
        ["install", "gigachat3", "--tokenizer", str(folder), "--output", str(tmp_path / "o")],
    ]
    for args in commands:
        code, out, err = run(capsys, *args)
        assert code == 2 and "chat_template.jinja: a symlink to" in err and "outside the folder" in err, (args, err)
        assert "secret" not in out
    assert not (tmp_path / "o").exists()


def test_symlinked_folders_are_followed_inside_and_refused_outside(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    folder = tmp_path / "tok"
    shutil.copytree(good, folder)
    (folder / "templates").mkdir()
    (folder / "templates" / "tool_use.jinja").write_text("{{ 'tools' }}")
    (folder / "additional_chat_templates").symlink_to("templates")
    assert "additional_chat_templates/tool_use.jinja" in read_folder(folder).files
    code, _, err = run(capsys, "install", "gigachat3", "--tokenizer", str(folder), "--output", str(tmp_path / "o"))
    assert code == 0, err
    copied = tmp_path / "o" / "additional_chat_templates" / "tool_use.jinja"
    assert copied.read_text() == "{{ 'tools' }}" and not copied.is_symlink()
    (tmp_path / "elsewhere").mkdir()
    (folder / "extra").symlink_to(tmp_path / "elsewhere")
    code, _, err = run(capsys, "install", "gigachat3", "--tokenizer", str(folder), "--output", str(tmp_path / "o2"))
    assert code == 2 and "extra: a symlink to" in err and "outside the folder" in err, err
    (folder / "extra").unlink()
    (folder / "templates" / "loop").symlink_to("..")
    code, _, err = run(capsys, "install", "gigachat3", "--tokenizer", str(folder), "--output", str(tmp_path / "o2"))
    assert code == 2 and "a loop" in err, err
