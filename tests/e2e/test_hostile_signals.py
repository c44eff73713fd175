"""SIGTERM (what `timeout`, Slurm and `docker stop` send) ends a run as Ctrl-C does: a message, the staging and the
lock removed, exit 143 (tests/hostile/INPUTS.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hf_chat_templates.outputs import STAGING_MARK


def test_sigterm_cleans_up_and_exits_143(good: Path, tmp_path: Path) -> None:
    data = tmp_path / "c.jsonl"
    with data.open("w") as handle:
        for i in range(60_000):
            messages = [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"answer {i} " * 20}]
            handle.write(json.dumps({"messages": messages}) + "\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "hf_chat_templates", "prepare", str(good), "--conversations", str(data)]
    process = subprocess.Popen(
        [*command, "--output", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f".out{STAGING_MARK}*")) and time.monotonic() < deadline:
        if process.poll() is not None:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be stopped: give it more records"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".out*")), list(tmp_path.iterdir())
