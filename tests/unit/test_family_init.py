"""`family init` writes a family folder for a template of your own: tokens declared or inferred (and said which),
the keywords it reads, provenance; the registry loads it, and `--families` installs it like a bundled family."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from hf_chat_templates.families.registry import FAMILIES_ENV, _load_all

from ..helpers import GOOD, run

PLAIN_END = (
    "{% for m in messages %}{{ m['role'] + ': ' + (m['content'] if m['content'] is string else '') + 'END_OF_TURN' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


@pytest.fixture(autouse=True)
def no_extra_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAMILIES_ENV, "")  # no folders of the environment; restored after
    _load_all.cache_clear()


def test_init_then_install(capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    template = tmp_path / "mine.jinja"
    template.write_text("{%- if date_string is defined %}{{ date_string }}{% endif %}" + GOOD)
    families = tmp_path / "families"
    code, out, err = run(
        capsys,
        "family",
        "init",
        "my-chatml",
        "--template",
        str(template),
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(families),
    )
    assert code == 0, err
    folder = families / "my-chatml"
    assert (folder / "template.jinja").read_bytes() == template.read_bytes()
    text = (folder / "family.toml").read_text()
    assert "# Tokens: inferred from the template's renderings" in text
    config = tomllib.loads(text)
    main = config["variants"]["main"]
    assert main["control_tokens"] == ["<|im_start|>", "<|im_end|>"] and main["stop_tokens"] == ["<|im_end|>"]
    assert list(main["kwargs"]) == ["date_string"] and len(main["provenance"]["sha256"]) == 64
    code, out, err = run(
        capsys,
        "install",
        "my-chatml",
        "--families",
        str(families),
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["family"] == "my-chatml"
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    assert len(tok.encode("<|im_end|>", add_special_tokens=False)) == 1 and tok.eos_token == "<|im_end|>"


def test_a_turn_end_nothing_can_infer(capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN_END)
    args = [
        "family",
        "init",
        "plain",
        "--template",
        str(template),
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "families"),
    ]
    code, _, err = run(capsys, *args)
    assert code == 2 and "no token ends an assistant turn" in err and "--stop-token TOKEN" in err
    assert not (tmp_path / "families" / "plain").exists()
    code, _, err = run(capsys, *args, "--stop-token", "END_OF_TURN")
    assert code == 0, err
    text = (tmp_path / "families" / "plain" / "family.toml").read_text()
    assert "# Tokens: declared" in text and tomllib.loads(text)["variants"]["main"]["stop_tokens"] == ["END_OF_TURN"]
    code, _, err = run(capsys, *args, "--stop-token", "END_OF_TURN")
    assert code == 2 and "exists and is not empty" in err and "--force" in err
