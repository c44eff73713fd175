"""The command line in a fresh process: tracebacks only on request, and a light import path."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


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
    """The process of one command hides torch from transformers, and says nothing about it, but for `prepare` and
    a GGUF file (transformers builds its tokenizer with modules that import torch)."""
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
    assert installed is ("PyTorch" not in hidden.stderr)
    for kept in (["prepare", "x"], ["verify", "model.gguf"], ["verify", "x", "--against=folder"]):
        run = subprocess.run([sys.executable, "-c", code, *kept], capture_output=True, text=True, check=True)
        assert "HIDDEN False YOUNG True" in run.stdout, kept
