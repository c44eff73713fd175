"""The command line in a fresh process: tracebacks only on request, and a light import path."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_debug_variable_shows_the_traceback(toy_tokenizer: Path, tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "hf_chat_templates",
        "install",
        "gigachat3",
        "--tokenizer",
        str(tmp_path / "missing"),
        "--output",
        str(tmp_path / "out"),
    ]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr and "no such folder" in quiet.stderr
    loud = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_CHAT_TEMPLATES_DEBUG": "1"}
    )
    assert loud.returncode != 0 and "Traceback" in loud.stderr


def test_light_import_path() -> None:
    """`import hf_chat_templates` and `--help` must not import transformers (nor tokenizers)."""
    code = (
        "import sys\n"
        "import hf_chat_templates\n"
        "from hf_chat_templates.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "try:\n"
        "    main(['install', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('transformers', 'tokenizers', 'huggingface_hub', 'torch') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in result.stdout


def test_a_command_line_process_leaves_torch_out() -> None:
    """The process of one command hides torch from transformers, and says nothing about it, but for `prepare
    --engine ray` (Ray may hand data to torch) and conversations from the Hub (datasets' hasher imports torch). A GGUF
    file's tokenizer is built without torch, so a command naming one hides it too."""
    code = (
        "import gc, sys\n"
        "from hf_chat_templates.cli.main import process_settings\n"
        "process_settings(sys.argv[1:])\n"
        "from transformers import AutoTokenizer\n"
        "hidden = 'torch' in sys.modules and sys.modules['torch'] is None\n"
        "print('HIDDEN', hidden, 'YOUNG', gc.get_threshold()[0] >= 50000)\n"
    )
    installed = importlib.util.find_spec("torch") is not None  # without torch there is nothing to hide
    hidden = subprocess.run([sys.executable, "-c", code, "verify", "x"], capture_output=True, text=True, check=True)
    assert f"HIDDEN {installed} YOUNG True" in hidden.stdout
    assert "PyTorch" not in hidden.stderr
    gguf = (["verify", "model.gguf"], ["verify", "x", "--against=folder"], ["install", "f", "--gguf", "m.gguf"])
    for local in (["prepare", "x", "y", "-o", "z"], ["prepare", "x", "--conversations", __file__], *gguf):
        prepared = subprocess.run([sys.executable, "-c", code, *local], capture_output=True, text=True)
        assert f"HIDDEN {installed} YOUNG True" in prepared.stdout, local
    hub = ["prepare", "x", "--conversations", "org/dataset"]  # datasets' hasher imports torch when it is in sight
    for kept in (["prepare", "x", "--engine", "ray"], ["prepare", "--engine=ray"], hub):
        run = subprocess.run([sys.executable, "-c", code, *kept], capture_output=True, text=True, check=True)
        assert "HIDDEN False YOUNG True" in run.stdout, kept


def test_transformers_notice_without_torch_is_silenced_on_import() -> None:
    """Without torch (absent, or hidden as here), transformers logs "PyTorch was not found" at import; importing the
    package first drops that notice, in any process, and keeps transformers' other messages."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import hf_chat_templates\n"
        "import transformers\n"
        "from transformers.utils import logging\n"
        "logging.get_logger('transformers').warning('another message')\n"
    )
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "warning"}  # the suite's own setting would hide both
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "PyTorch" not in done.stderr and "another message" in done.stderr


def test_prepare_runs_in_a_command_line_process_with_torch_hidden(
    chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`prepare` hides torch too (datasets' fingerprint pickler would import it, were its hidden entry in sight):
    the dataset written, plain and packed, is the one the same call writes in a process that sees torch."""
    import json

    from datasets import load_from_disk

    from ..helpers import CONVERSATIONS, run, write_jsonl

    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    for extra in ([], ["--pack", "64"]):
        out = tmp_path / f"out{len(extra)}"
        args = ["prepare", str(chatml), "--conversations", str(data), "--output", str(out), *extra]
        cli = [sys.executable, "-m", "hf_chat_templates", *args]
        done = subprocess.run(cli, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr
        assert "torch" not in done.stderr
        assert run(capsys, *[a if a != str(out) else str(out) + "-here" for a in args])[0] == 0
        assert load_from_disk(str(out)).to_dict() == load_from_disk(str(out) + "-here").to_dict()
