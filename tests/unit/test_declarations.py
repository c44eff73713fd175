"""What a user declares about a template that no family describes: `--stop-token` replaces the inferred stop,
`--control-token` is checked with the tokens found, `--kwarg` reaches the template; in verify and in prepare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..helpers import GOOD, chatml_folder, run, write_jsonl

# Turns end with a marker of no control-token shape: nothing can be inferred, so it has to be declared.
PLAIN_END = (
    "{% for m in messages %}{{ m['role'] + ': ' + (m['content'] if m['content'] is string else '') + 'END_OF_TURN' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return chatml_folder(tmp_path / "tok")


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, "verify", *args, "--json")
    return code, json.loads(out)


def test_a_declared_stop_token_replaces_the_inferred_one(capsys: pytest.CaptureFixture[str], folder: Path) -> None:
    code, doc = _check(capsys, str(folder), "--only", "stop-token-registered")
    assert code == 0 and "<|im_end|>" in doc["checks"][0]["message"]
    code, doc = _check(capsys, str(folder), "--only", "stop-token-registered", "--stop-token", "<|im_start|>")
    assert code == 1
    assert "stop token <|im_start|>" in doc["checks"][0]["message"] and "<|im_end|>" not in doc["checks"][0]["message"]


def test_a_declared_control_token_is_checked(capsys: pytest.CaptureFixture[str], folder: Path) -> None:
    code, doc = _check(
        capsys, str(folder), "--only", "control-tokens-atomic", "--control-token", "[MARK]", "--allow-unwritten-token"
    )
    assert code == 1 and "[MARK] is not one token" in doc["checks"][0]["message"]


def test_a_kwarg_reaches_the_template(capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{% if greeting is not defined %}{{ raise_exception('pass greeting') }}{% endif %}" + GOOD)
    code, doc = _check(capsys, str(folder), "--template", str(template), "--only", "renders")
    assert doc["checks"][0]["status"] == "info" and "pass greeting" in doc["checks"][0]["message"]
    code, doc = _check(capsys, str(folder), "--template", str(template), "--only", "renders", "--kwarg", "greeting=hi")
    assert code == 0 and doc["checks"][0]["status"] == "pass"


def test_verify_says_how_to_declare_an_unknown_stop(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN_END)
    code, out, _ = run(capsys, "verify", str(folder), "--template", str(template), "--only", "stop-token-registered")
    assert code == 1 and "no stop token: no token ends an assistant turn" in out and "--stop-token TOKEN" in out
    code, out, _ = run(
        capsys,
        "verify",
        str(folder),
        "--template",
        str(template),
        "--only",
        "completion-matches-content",
        "--stop-token",
        "END_OF_TURN",
    )
    # Declared, it is used: the check now reads it, and fails for the next reason (it is not one registered token).
    assert "no token ends an assistant turn" not in out and "then END_OF_TURN" in out


def test_prepare_takes_a_declared_stop(capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    template = tmp_path / "plain.jinja"
    template.write_text(PLAIN_END)
    data = write_jsonl(
        tmp_path / "c.jsonl",
        [
            json.dumps(
                {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Fine thanks"}]}
            )
        ],
    )
    args = ["prepare", str(folder), "--template", str(template), "--conversations", str(data)]
    code, _, err = run(capsys, *args, "--output", str(tmp_path / "none"))
    assert code == 2 and "no token ends an assistant turn" in err and "--stop-token TOKEN" in err
    assert not (tmp_path / "none").exists()
    code, _, err = run(capsys, *args, "--output", str(tmp_path / "ds"), "--stop-token", "END_OF_TURN")
    assert code == 0, err
    row = load_from_disk(str(tmp_path / "ds"))[0]
    trained = [t for t, label in zip(row["input_ids"], row["labels"]) if label != -100]
    text = AutoTokenizer.from_pretrained(str(folder)).decode(trained)
    assert text.startswith("Fine thanks") and text.endswith("END_OF_TURN")


def test_prepare_says_where_its_stop_came_from(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    line = json.dumps({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]})
    data = write_jsonl(tmp_path / "c.jsonl", [line])
    code, out, _ = run(capsys, "prepare", str(folder), "--conversations", str(data), "--output", str(tmp_path / "a"))
    assert (
        code == 0
        and "stop tokens: <|im_end|> (the folder's generation_config.json eos_token_id, where the template writes it)"
        in out
    )
    code, out, _ = run(
        capsys,
        "prepare",
        str(folder),
        "--conversations",
        str(data),
        "--output",
        str(tmp_path / "b"),
        "--stop-token",
        "<|im_end|>",
        "--json",
    )
    doc = json.loads(out)
    assert code == 0 and doc["tokens_from"] == "declared" and doc["stop_tokens"] == ["<|im_end|>"]
