"""A process of its own fed a JSON request and read for one JSON value, begun now and waited for later: what
`verify` hands to another core (llama.cpp's engine, the official renderers) while its checks run here."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any


def start(command: list[str], request: str, seconds: float) -> Callable[[], Any]:
    """`command` started with `request` on its stdin and read by a thread; the function returned waits for the
    JSON value it wrote, or None when it could not start, failed, wrote something else or ran past `seconds`."""
    try:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
    except OSError:
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
