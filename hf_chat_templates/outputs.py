"""The one writer: every folder and file this package writes is staged beside its target, then renamed into place.

A killed process leaves either the old output or the new one, never half of either. A staging folder is a hidden
sibling named `.NAME.hfct-staging-PID-XXXX`; one left behind by a killed run (its process gone) is removed by the
next write of the same output, while one of a run still going is left alone. An output that is replaced (only
when asked: `force`) is moved aside as `NAME.replaced-YYYYmmdd-HHMMSS` (with `-2`, `-3`, … when that name is
taken), never deleted.

>>> with staged_folder(Path("out"), force=False) as staging:     # doctest: +SKIP
...     (staging.path / "a.txt").write_text("…")
>>> staging.replaced_to                                           # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import HfChatTemplatesError, OutputExistsError, TokenizerFolderError, option

STAGING_MARK = ".hfct-staging-"


def check_output(output: Path, *, force: bool, parameter: str = "output") -> None:
    """Refuse an existing non-empty output folder unless `force`; refuse a file in its place always."""
    if output.exists() and not output.is_dir():
        raise OutputExistsError(
            f"{output}: exists and is not a folder",
            hint=f"choose another {option('output')}",
            path=output,
            parameter=parameter,
        )
    if output.is_dir() and any(output.iterdir()) and not force:
        raise OutputExistsError(
            f"{output}: exists and is not empty",
            hint=f"choose another {option('output')}, or pass {option('force')} to replace it "
            "(the old folder is kept beside it)",
            path=output,
            parameter=parameter,
        )


def backup_path(output: Path) -> Path:
    """Where an output that is replaced is kept: NAME.replaced-TIME, numbered when that is taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = output.parent / f"{output.name}.replaced-{stamp}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = output.parent / f"{output.name}.replaced-{stamp}-{n}"
    return candidate


def is_staging(name: str) -> bool:
    return STAGING_MARK in name


def _private_umask_fix(path: Path, mode: int) -> None:
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(mode & ~umask)  # mkdtemp/mkstemp make it private; the output is an ordinary folder or file


@dataclass
class Staging:
    """The staging folder of one write. `discard()` inside the block publishes nothing; after the block,
    `replaced_to` says where a replaced output was moved."""

    path: Path
    output: Path
    discarded: bool = False
    replaced_to: Path | None = None

    def discard(self) -> None:
        self.discarded = True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _sweep_stale(parent: Path, name: str) -> None:
    """Remove the staging folders of `name` whose process has ended: a killed run's, never published, so nothing
    refers to them. A staging folder of a run still going (another process writing the same output) is left."""
    prefix = f".{name}{STAGING_MARK}"
    for stale in parent.glob(prefix + "*"):
        owner = stale.name[len(prefix) :].split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(stale, ignore_errors=True)


def _new_staging(output: Path, where_hint: str) -> Path:
    parent = output.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _sweep_stale(parent, output.name)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}{STAGING_MARK}{os.getpid()}-", dir=parent))
        _private_umask_fix(staging, 0o777)
    except OSError as err:
        raise TokenizerFolderError(
            f"{parent}: cannot write the output folder here ({err.strerror or err})",
            hint=where_hint,
            path=parent,
            parameter="output",
        ) from None
    return staging


def _publish(staging: Path, output: Path) -> Path | None:
    backup = None
    if output.exists():
        if any(output.iterdir()):
            backup = backup_path(output)
            os.replace(output, backup)
        else:
            output.rmdir()
    os.replace(staging, output)
    return backup


@contextlib.contextmanager
def staged_folder(output: Path, *, force: bool, where_hint: str | None = None) -> Iterator[Staging]:
    """Stage a new folder for `output`; when the block ends without an error, rename it into place. `where_hint`
    says what to do when the output's location cannot be written (default: choose another output)."""
    output = Path(output).absolute()
    check_output(output, force=force)
    hint = where_hint or f"choose an {option('output')} in a writable location"
    staging = Staging(_new_staging(output, hint), output)
    try:
        yield staging
        if not staging.discarded:
            staging.replaced_to = _publish(staging.path, output)
    except HfChatTemplatesError:
        raise
    except OSError as err:
        raise TokenizerFolderError(
            f"{output}: writing failed ({err.strerror or err}); nothing was published",
            hint="check free space and permissions of the output location",
            path=output,
        ) from None
    finally:
        shutil.rmtree(staging.path, ignore_errors=True)


def write_file(path: Path, data: bytes | str) -> None:
    """Write one file whole or not at all: a temporary file beside it, then a rename."""
    path = Path(path)
    if path.is_dir():
        raise OutputExistsError(f"{path}: is a folder", hint="give a file name such as report.html", path=path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{STAGING_MARK}", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            _private_umask_fix(Path(tmp), 0o666)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise TokenizerFolderError(
            f"{path}: cannot write ({err.strerror or err})", hint="choose a writable path", path=path
        ) from None
