"""A process of its own fed a JSON request and read for one JSON value, begun now and waited for later: what
`verify` hands to another core (llama.cpp's engine, the official renderers) while its checks run here.

A worker may be begun before its request is known (`prestart`): it sets itself up (its imports, a tokenizer load)
while the caller loads its own, and waits on stdin; `start` with the same command hands the request to it instead
of beginning another. One never asked is ended by `close_idle` (and at exit); a worker whose stdin closes with no
request ends itself.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any

# Workers begun by `prestart` and not yet asked, by command.
_IDLE: dict[tuple[str, ...], subprocess.Popen[str]] = {}


def _popen(command: list[str]) -> subprocess.Popen[str] | None:
    try:
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    except OSError:
        return None


def prestart(command: list[str]) -> None:
    """`command` begun now, to be handed its request by a later `start` with the same command (one at a time)."""
    key = tuple(command)
    if key not in _IDLE and (process := _popen(command)) is not None:
        _IDLE[key] = process


def close_idle() -> None:
    """End every worker begun by `prestart` that no `start` has asked."""
    while _IDLE:
        _, process = _IDLE.popitem()
        with process:
            process.kill()
            process.communicate()


atexit.register(close_idle)


def start(command: list[str], request: str, seconds: float) -> Callable[[], Any]:
    """`command` started with `request` on its stdin (or the one `prestart` began, given it now) and read by a
    thread; the function returned waits for the JSON value it wrote, or None when it could not start, failed, wrote
    something else or ran past `seconds`."""
    process = _IDLE.pop(tuple(command), None) or _popen(command)
    if process is None:
        return lambda: None
    found: list[Any] = []

    def collect() -> None:
        with process:  # its pipes closed and the child reaped, whatever happens here
            try:
                out, _ = process.communicate(request, timeout=seconds)
                found.append(json.loads(out) if process.returncode == 0 else None)
            except Exception:  # ran past `seconds`, wrote no JSON, a broken pipe: the caller does the work
                process.kill()
                process.communicate()
                found.append(None)

    reader = threading.Thread(target=collect, name=f"worker {command[-1]}", daemon=True)
    reader.start()

    def wait() -> Any:
        reader.join()
        return found[0] if found else None

    return wait
