"""The one writer: every folder and file this package writes is staged beside its target, then renamed into place.

A killed process leaves either the old output or the new one, never half of either. A write of the folder NAME
holds a lock on it for its whole length (`fcntl.flock` on the hidden sibling `.NAME.lock`, which names its
process): a second writer of the same output fails at once naming the first, instead of the two removing each
other's work. A staging folder (or file) is a hidden sibling named `.NAME.hfct-staging-PID-XXXX`; one left behind
by a killed run (its process gone) is removed by the next write of the same output, under the lock; one of a
process still going is left alone. Only regular files are written: a device, FIFO or socket in the way is
refused, and `-` is standard output. An output that is replaced (only when asked: `force`) is moved aside as
`NAME.replaced-YYYYmmdd-HHMMSS` (with `-2`, `-3`, … when that name is taken), never deleted. A place that cannot
be written (no permission, a read-only file system, no space) is an error naming the path and what to do.

>>> with staged_folder(Path("out"), force=False) as staging:     # doctest: +SKIP
...     (staging.path / "a.txt").write_text("…")
>>> staging.replaced_to                                           # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import HfChatTemplatesError, OutputBusyError, OutputExistsError, TokenizerFolderError, option

STAGING_MARK = ".hfct-staging-"
STDOUT = "-"
# What to do when a place cannot be written, by errno; for any other error, choose another output.
_UNWRITABLE = {
    errno.EACCES: "choose an {output} you can write, or change the folder's permissions",
    errno.EPERM: "choose an {output} you can write, or change the folder's permissions",
    errno.EROFS: "the file system is read-only: choose an {output} on a writable one",
    errno.ENOSPC: "the disk is full: free some space there, or choose an {output} on another disk",
    errno.EDQUOT: "the disk quota is used up: free some space there, or choose an {output} on another disk",
}


def unwritable(path: Path, err: OSError, doing: str, hint: str | None = None) -> TokenizerFolderError:
    """The error for an OSError met writing `path`: what was being done, why it failed, and what to do (`hint`,
    else what fits the error)."""
    fix = _UNWRITABLE.get(err.errno or 0, "choose another {output}")
    return TokenizerFolderError(
        f"{path}: {doing} ({err.strerror or err})",
        hint=hint or fix.format(output=option("output")),
        path=path,
        parameter="output",
    )


def check_output(output: Path, *, force: bool, parameter: str = "output") -> None:
    """Refuse an existing non-empty output folder unless `force`; refuse a file in its place always."""
    try:
        _check_output(output, force=force, parameter=parameter)
    except HfChatTemplatesError:
        raise
    except OSError as err:
        raise unwritable(output, err, "cannot read the output folder") from None


def _check_output(output: Path, *, force: bool, parameter: str) -> None:
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


def check_outside(output: Path, source: str | os.PathLike[str], what: str) -> None:
    """Refuse an output folder inside the folder `source` (`what` names it: "the source tokenizer"), or one that
    holds it: a later copy of the source would carry the output as one of its files, and replacing the output
    would move the source aside."""
    src = Path(source)
    if not src.is_dir():
        return  # a file or a Hub id: nothing to write into
    out, src = Path(os.path.realpath(output)), Path(os.path.realpath(src))
    if out != src and (out.is_relative_to(src) or src.is_relative_to(out)):
        inside = out.is_relative_to(src)
        raise OutputExistsError(
            f"{output}: {option('output')} is {'inside' if inside else 'a folder holding'} {what} {source}",
            hint=f"choose an {option('output')} outside {source}",
            path=output,
            parameter="output",
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


def sweep_stale(parent: Path, name: str) -> None:
    """Remove the staging folders and files of `name` whose process has ended: a killed run's, never published, so
    nothing refers to them. Staging of a process still going is left."""
    prefix = f".{name}{STAGING_MARK}"
    for stale in parent.glob(glob.escape(prefix) + "*"):
        owner = stale.name[len(prefix) :].split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    stale.unlink()


def lock_path(output: Path) -> Path:
    return output.parent / f".{output.name}.lock"


def _lock_owner(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = os.pread(fd, 32, 0).decode("ascii").strip()
        if pid.isdigit():
            return f"process {pid}"
    return "another process"


@contextlib.contextmanager
def output_lock(output: Path, *, wait: float = 0.0) -> Iterator[None]:
    """Hold the lock of `output` for the block, or raise OutputBusyError naming the process that holds it (after
    waiting up to `wait` seconds for it). The lock file is removed on release; a writer that locked a file since
    removed locks the new one instead."""
    path = lock_path(output)
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise unwritable(output.parent, err, "cannot write here (its lock file cannot be made)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _lock_owner(fd)
            os.close(fd)
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise OutputBusyError(
                f"{output}: {owner} is writing this output now",
                hint=f"wait for it to finish, or choose another {option('output')}",
                path=output,
                parameter="output",
            ) from None
        held, current = os.fstat(fd), _stat(path)
        if current is not None and (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino):
            break
        os.close(fd)  # the file was removed by its last holder between our open and our lock: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _new_staging(output: Path) -> Path:
    sweep_stale(output.parent, output.name)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}{STAGING_MARK}{os.getpid()}-", dir=output.parent))
    _private_umask_fix(staging, 0o777)
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
def staged_folder(output: Path, *, force: bool, where_hint: str | None = None, wait: float = 0.0) -> Iterator[Staging]:
    """Stage a new folder for `output` under its lock; when the block ends without an error, rename it into place.
    `where_hint` says what to do when the output's location cannot be written (default: what fits the error);
    `wait` is how long to wait for another writer of the same output before giving up."""
    output = Path(output).absolute()
    check_output(output, force=force)
    with contextlib.ExitStack() as stack:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(output_lock(output, wait=wait))
            check_output(output, force=force)  # again, under the lock: another writer may have published meanwhile
            staging = Staging(_new_staging(output), output)
        except HfChatTemplatesError:
            raise
        except OSError as err:
            raise unwritable(output.parent, err, "cannot write the output folder here", where_hint) from None
        try:
            yield staging
            if not staging.discarded:
                staging.replaced_to = _publish(staging.path, output)
        except HfChatTemplatesError:
            raise
        except OSError as err:
            raise unwritable(output, err, "writing failed; nothing was published", where_hint) from None
        finally:
            shutil.rmtree(staging.path, ignore_errors=True)


def is_stdout(path: str | os.PathLike[str] | None) -> bool:
    """Whether an output path is `-`, standard output."""
    return path is not None and os.fspath(path) == STDOUT


def check_regular_target(path: Path) -> None:
    """Refuse a file output whose path holds anything but a regular file (or a symlink to one): a folder, a device,
    a FIFO, a socket. Renaming over one would replace it (a device node, as root) instead of writing to it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise OutputExistsError(
                f"{path}: a symlink to a missing file", hint="give a plain file name, or remove the link", path=path
            ) from None
        return
    except OSError as err:
        raise unwritable(path, err, "cannot read the output path") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputExistsError(f"{path}: is a folder", hint="give a file name such as report.html", path=path)
    if not stat.S_ISREG(st.st_mode):
        raise OutputExistsError(
            f"{path}: is not a regular file (a device, FIFO or socket); only regular files are written",
            hint="give a file name, or '-' for standard output",
            path=path,
        )


def write_file(path: Path, data: bytes | str) -> None:
    """Write one file whole or not at all: a temporary file beside it, then a rename. `-` is standard output.
    Only a regular file is written or replaced (`check_regular_target`)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if is_stdout(path):
        sys.stdout.flush()
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    check_regular_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path.parent, path.name)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{STAGING_MARK}{os.getpid()}-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            _private_umask_fix(Path(tmp), 0o666)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        fix = _UNWRITABLE.get(err.errno or 0, "choose another {output}").format(output="file")
        raise unwritable(path, err, "cannot write", hint=fix) from None
