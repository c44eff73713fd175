"""GGUF files through the installed command in fresh processes: a corrupt file is a clear error with exit 2, and
`verify FILE.gguf --against FOLDER` / `install --gguf` give their exit codes and write only the new file."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hf_chat_templates.gguf import read_gguf
from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.loading import gguf_tokenizer_folder
from tests.helpers import chatml_folder
from tests.unit.test_gguf_loading import sentencepiece_gguf

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hf_chat_templates", *args], capture_output=True, text=True, env=ENV)


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("gguf-cli")
    folder = chatml_folder(root / "tok")
    return folder, export_vocab_gguf(folder, root / "toy.gguf", pre="gpt-2")


@pytest.mark.parametrize(
    "data, message",
    [
        (b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + b"\x10\x00", "the file is truncated or corrupt"),
        (b"\x00" * 64, "not a GGUF file"),
    ],
)
def test_a_corrupt_gguf_is_a_clear_error(tmp_path: Path, data: bytes, message: str) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(data)
    for args in (["verify", str(bad)], ["install", "gigachat3", "--gguf", str(bad), "--output", str(tmp_path / "o")]):
        result = cli(*args)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "to fix:" in result.stderr and "Traceback" not in result.stderr
    assert bad.read_bytes() == data and not (tmp_path / "o").exists()


def test_verify_against_and_install_round_trip(toy: tuple[Path, Path], tmp_path: Path) -> None:
    folder, gguf = toy
    ok = cli("verify", str(gguf), "--against", str(folder), "--only", "renders,control-tokens-atomic")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    template = tmp_path / "t.jinja"
    template.write_text(
        "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' -}}{%- endfor -%}"
    )
    out = tmp_path / "new.gguf"
    dry = cli("install", "--template", str(template), "--gguf", str(gguf), "--output", str(out), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan, stop = json.loads(dry.stdout), read_gguf(gguf).tokens.index("<|im_end|>")
    assert plan["token_ids"] == {"eos": stop, "eot": stop, "eom": 2} and not out.exists()  # </s> stays a stop id
    assert plan["changed_keys"] == [
        "tokenizer.chat_template",
        "tokenizer.ggml.eom_token_id",
        "tokenizer.ggml.eos_token_id",
    ]
    done = cli("install", "--template", str(template), "--gguf", str(gguf), "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert read_gguf(out).chat_template == template.read_text()
    differs = cli("verify", str(out), "--against", str(folder), "--only", "renders")
    assert differs.returncode == 1
    assert "chat template 'default' (tokenizer.chat_template): GGUF" in differs.stdout


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A byte-level (gpt2) and a SentencePiece (llama) vocabulary-only GGUF file."""
    root = tmp_path_factory.mktemp("gguf-no-torch")
    return {
        "gpt2": export_vocab_gguf(chatml_folder(root / "tok"), root / "gpt2.gguf", pre="gpt-2"),
        "llama": sentencepiece_gguf(root / "llama.gguf", "llama"),
    }


NO_TORCH = """
import json, sys
sys.modules["torch"] = None
from hf_chat_templates.gguf.loading import gguf_tokenizer_folder
from transformers import AutoTokenizer
out = gguf_tokenizer_folder(sys.argv[1], sys.argv[2])
tok = AutoTokenizer.from_pretrained(out)
print(json.dumps({"ids": tok.encode(sys.argv[3]), "torch": sys.modules["torch"] is None}))
"""


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_without_torch_a_gguf_tokenizer_folder_is_the_same(
    gguf_files: dict[str, Path], model: str, tmp_path: Path
) -> None:
    text = "ab ba<|im_end|>"
    with tempfile.TemporaryDirectory() as here:
        gguf_tokenizer_folder(gguf_files[model], Path(here) / "tok")
        expected = (Path(here) / "tok" / "tokenizer.json").read_text(encoding="utf-8")
        from transformers import AutoTokenizer

        ids = AutoTokenizer.from_pretrained(str(Path(here) / "tok")).encode(text)
    out = tmp_path / "tok"
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(gguf_files[model]), str(out), text], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"ids": ids, "torch": True}
    assert (out / "tokenizer.json").read_text(encoding="utf-8") == expected


def test_verify_and_install_a_gguf_file_run_without_torch(gguf_files: dict[str, Path], tmp_path: Path) -> None:
    code = "import sys; sys.modules['torch'] = None\nfrom hf_chat_templates.cli import main\nmain(sys.argv[1:])\n"
    template, out = tmp_path / "t.jinja", tmp_path / "out.gguf"
    template.write_text(
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    for args in (
        ["verify", str(gguf_files["gpt2"]), "--only", "stop-token-registered"],
        ["install", "--template", str(template), "--gguf", str(gguf_files["gpt2"]), "--output", str(out)],
    ):
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=ENV)
        assert done.returncode in (0, 1), done.stderr
        assert "No module named" not in done.stderr and "convert the model again" not in done.stderr, done.stderr
    assert read_gguf(out).chat_template == template.read_text()
