"""The entry point: run a command, and turn every error into a message and an exit code.

Exit codes: 0 success, 1 verification found failures, 2 usage, input or environment error, 3 an internal error
(an unexpected exception: a bug to report). Errors print what failed and what to do; HF_CHAT_TEMPLATES_DEBUG=1 (or
true, yes, on) adds the traceback and changes nothing else, the exit code included. A command is one render run:
renders of one template share one budget. A library error names its arguments with `errors.option(name)`; here
they are written as the options that set them (`max_length` → `--max-length`). A command that finds failures
(verify) exits 1 itself; `push` raises VerificationFailed.

Run as a program (the `hf-chat-templates` script, `python -m hf_chat_templates`), the process is set up for one
short command (`process_settings`): the collector runs less often, and torch is hidden (but from `prepare --engine
ray`, and a GGUF file's tokenizer when transformers builds it only with torch), so that transformers does not import
it. Called with an argument list (tests, scripts), nothing changes.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import itertools
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import click

from ..errors import HfChatTemplatesError
from ..publish.hub import VerificationFailed
from ..template.limits import render_run
from . import (  # noqa: F401  (they register commands)
    catalog,
    checking,
    diffing,
    exporting,
    installing,
    porting,
    publishing,
    training,
    viewing,
)
from .app import cli, emit_json

DEBUG_ENV = "HF_CHAT_TEMPLATES_DEBUG"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})

# A library parameter whose option is not simply --name-with-dashes.
_OPTIONS = {
    "kwargs": "--kwarg",
    "source": "SOURCE",
    "stop_tokens": "--stop-token",
    "control_tokens": "--control-token",
    "allow_unwritten_tokens": "--allow-unwritten-token",
}


_TERMINATED: list[int] = []  # SIGTERM was received (click turns the exception into Abort on its way out)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, Slurm and `docker stop` send), raised where the program is, so that its cleanup runs
    as for Ctrl-C: staging removed, locks released, nothing half-published."""


def _on_sigterm(signum: int, frame: Any, *, main_pid: int) -> None:
    if os.getpid() != main_pid:  # a worker process forked from this one: end as SIGTERM ends it by default
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _TERMINATED.append(signum)
    raise Terminated()


def handle_sigterm() -> None:
    """Turn SIGTERM into `Terminated` in this process (from the main thread only, where signals are handled)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, functools.partial(_on_sigterm, main_pid=os.getpid()))


# The one table from what went wrong to the exit code; the first matching row wins.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (VerificationFailed, 1),  # verification found failures, so nothing was published: a result, not a crash
    (Terminated, 128 + signal.SIGTERM),  # 143, as a shell reports a process ended by SIGTERM
    (click.exceptions.Abort, 2),
    (click.ClickException, 2),
    (HfChatTemplatesError, 2),
    (KeyboardInterrupt, 2),
    (Exception, 3),  # none of the above: a bug in this program, not the user's input
)


def option_name(parameter: str) -> str:
    """The command-line option that sets a library parameter."""
    return _OPTIONS.get(parameter, "--" + parameter.replace("_", "-"))


def _report(err: BaseException) -> None:
    """What went wrong, on stderr, in the CLI's words."""
    if isinstance(err, click.exceptions.Abort):
        click.echo("aborted", err=True)
    elif isinstance(err, click.ClickException):
        err.show()
    elif isinstance(err, HfChatTemplatesError):
        click.echo(f"error: {err.render(err.template, option_name)}", err=True)
        if err.hint_template:
            click.echo(f"  to fix: {err.render(err.hint_template, option_name)}", err=True)
    elif isinstance(err, Terminated):
        click.echo("terminated (SIGTERM); nothing was published, staging removed", err=True)
    elif isinstance(err, KeyboardInterrupt):
        click.echo("interrupted; nothing was published", err=True)
    else:  # an unexpected failure (exit 3) is still reported without a traceback by default
        click.echo(f"error: unexpected {type(err).__name__}: {err} (an internal error of hf-chat-templates)", err=True)
        click.echo(f"  to fix: rerun with {DEBUG_ENV}=1 for the traceback and report this, with the command", err=True)


def debug_enabled() -> bool:
    """HF_CHAT_TEMPLATES_DEBUG as a boolean: 1/true/yes/on, or 0/false/no/off/empty; anything else is a warning
    and off."""
    value = os.environ.get(DEBUG_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value not in _FALSE:
        click.echo(
            f"warning: {DEBUG_ENV}={os.environ[DEBUG_ENV]!r} is not a boolean (1/true/yes/on or 0/false/no/off); "
            "debug output is off",
            err=True,
        )
    return False


# Options that keep torch visible: Ray may hand data to it (`prepare --engine ray`); prepare's own engine writes
# Arrow with numpy and pyarrow, and datasets imports torch only to format rows as tensors.
TORCH_OPTIONS = (("--engine", "ray"),)
# Options that name a GGUF file: a transformers without torch-free GGUF tokenizer converters (gguf/loading.py)
# builds a GGUF file's tokenizer with modules that import torch.
GGUF_OPTIONS = frozenset({"--gguf", "--against"})
GGUF_CONVERTERS = ("integrations", "gguf", "gguf_tokenizer_mapping.py")
# Container allocations between two young-generation collections (CPython's default is 700): a command allocates
# millions of objects (transformers' import, a tokenizer.json of 17 MB parsed), and each collection of the older
# generations walks everything the process holds.
GC_YOUNG_THRESHOLD = 50_000


def process_settings(args: list[str]) -> None:
    """Settings for a process that runs one command (`args`, its command line): fewer collections, and no torch.

    transformers imports torch whenever it is installed (a second or more; its USE_TORCH variable is gone in 5.x),
    and only `prepare --engine ray` and a GGUF file's tokenizer need it: elsewhere `sys.modules["torch"] = None`
    makes `importlib.util.find_spec("torch")` None, so transformers takes torch as absent. Only in a fresh process:
    once torch or transformers is imported, nothing is hidden."""
    young, middle, old = gc.get_threshold()
    if young:  # 0: automatic collection is off, and stays off
        gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), middle, old)
    if (
        "torch" in sys.modules
        or "transformers" in sys.modules
        or _keeps_torch(args)
        or (_names_gguf(args) and _gguf_needs_torch())
    ):
        return
    if importlib.util.find_spec("torch") is None:  # not installed: nothing to hide
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # transformers' notice of it: see _compat


def _keeps_torch(args: list[str]) -> bool:
    """Whether the command line sets an option that keeps torch visible (`TORCH_OPTIONS`), as `--opt value` or
    `--opt=value`, or names conversations that are no local file or folder: a Hub dataset, which datasets loads
    with a hasher that imports torch whenever "torch" is in `sys.modules`."""
    pairs = {*itertools.pairwise(args), *(tuple(a.split("=", 1)) for a in args if "=" in a)}
    if any(pair in pairs for pair in TORCH_OPTIONS):
        return True
    try:
        return any(name == "--conversations" and not Path(value).exists() for name, value in pairs)
    except (OSError, ValueError):  # a value no path can be made of: the command reports it
        return True


def _names_gguf(args: list[str]) -> bool:
    """Whether the command line names a GGUF file (an option for one, or a file that is one); when in doubt, yes."""
    from ..gguf.reading import is_gguf

    try:
        return any(a.split("=", 1)[0] in GGUF_OPTIONS or is_gguf(a) for a in args)
    except Exception:  # an argument no path can be made of: the command reports it, with torch as it is
        return True


def _gguf_needs_torch() -> bool:
    """Whether the installed transformers lacks the torch-free GGUF tokenizer converters, found without importing
    it (an import of transformers would import torch)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return False
    return not any(Path(root, *GGUF_CONVERTERS).is_file() for root in spec.submodule_search_locations)


def exit_code(err: BaseException) -> int:
    return next(code for kind, code in EXIT_CODES if isinstance(err, kind))


def error_document(err: BaseException) -> dict[str, Any]:
    """The error as one JSON document, for a command run with --json: a script reading stdout always gets one."""
    if isinstance(err, HfChatTemplatesError):
        detail: dict[str, Any] = {
            "message": err.render(err.template, option_name),
            "hint": err.render(err.hint_template, option_name) if err.hint_template else None,
            "path": str(err.path) if err.path is not None else None,
            "key": err.key,
            "line": err.line,
            "option": option_name(err.parameter) if err.parameter else None,
        }
    elif isinstance(err, click.ClickException):
        detail = {"message": err.format_message(), "hint": None}
    else:
        detail = {"message": str(err) or type(err).__name__, "hint": None}
    return {"error": {"type": type(err).__name__, **detail}, "exit_code": exit_code(err)}


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn errors into a message and an exit code (`EXIT_CODES`). Without `argv` (a
    program's own command line), the process is set up for one command first (`process_settings`)."""
    if argv is None:
        process_settings(sys.argv[1:])
        handle_sigterm()
    try:
        with render_run():
            cli.main(args=argv, prog_name="hf-chat-templates", standalone_mode=False)
    except (Exception, KeyboardInterrupt) as caught:
        err: BaseException = Terminated() if _TERMINATED else caught
        debuggable = not isinstance(
            err, (VerificationFailed, click.exceptions.Abort, click.ClickException, KeyboardInterrupt)
        )
        if debuggable and debug_enabled():
            traceback.print_exception(err, file=sys.stderr)
        _report(err)
        # With --json, stdout holds one document whatever happens; push has printed its own on a failed verify.
        if "--json" in (sys.argv[1:] if argv is None else argv) and not isinstance(err, VerificationFailed):
            emit_json(error_document(err))
        sys.exit(exit_code(err))
    sys.exit(0)
