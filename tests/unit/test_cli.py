"""The command line: exit codes, messages on stderr without tracebacks, JSON on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..helpers import REPO_ROOT, run, snapshot


def test_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0
    assert [f["name"] for f in json.loads(out)] == ["gemma3-tools", "gigachat3", "gpt-oss", "llama3.2-pythonic"]
    code, out, _ = run(capsys, "show", "llama3.2-pythonic", "--variant", "upstream")
    assert code == 0 and "<|eot_id|>" in out and "date_string" in out
    code, out, _ = run(capsys, "show", "gemma3-tools", "--variant", "upstream", "--template")
    assert code == 0 and out.startswith("{{ bos_token }}")


def test_install_dry_run_writes_nothing(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    before = snapshot(toy_tokenizer)
    code, out, err = run(
        capsys,
        "install",
        "gigachat3",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--dry-run",
    )
    assert code == 0
    lines = out.splitlines()
    assert "add     chat_template.jinja" in out
    assert "    <|message_sep|> = id 401, added as a new special token" in lines
    assert (
        "  vocabulary grows 400 -> 403: resize the model's embeddings to 403 rows (model.resize_token_embeddings(403))"
        in lines
    )
    assert "warning: gigachat3: the vocabulary grows" in err
    assert not (tmp_path / "out").exists() and snapshot(toy_tokenizer) == before


def test_install_bos_postprocessor_kept_or_dropped(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    args = ["install", "gigachat3", "--tokenizer", str(toy_tokenizer), "--output", str(tmp_path / "out"), "--dry-run"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "BOS <s>: the post-processor keeps adding it" in out
    code, out, _ = run(capsys, *args, "--no-bos-postprocessor", "--json")
    assert code == 0 and json.loads(out)["bos"] == {
        "token": "<s>",
        "template_writes": True,
        "tokenizer_adds": False,
        "dropped": True,
    }


@pytest.mark.parametrize(
    ("pad", "message", "fix"),
    [
        ("<pad>", "error: --pad-token '<pad>' is not in the vocabulary", "to fix: pass a token the tokenizer has"),
        ("<|message_sep|>", "error: --pad-token <|message_sep|> is a stop token", "that is not a stop token such as"),
    ],
)
def test_install_pad_token_refused_exits_2(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, pad: str, message: str, fix: str
) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(
        capsys, "install", "gigachat3", "--tokenizer", str(toy_tokenizer), "--output", str(out), "--pad-token", pad
    )
    assert code == 2 and message in err and fix in err
    assert "Traceback" not in err and stdout == "" and not out.exists()


def test_install_pad_token(capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--tokenizer", str(toy_tokenizer), "--output", str(out), "--pad-token", "<|reserved_special_token_0|>"]
    code, stdout, err = run(capsys, "install", "gigachat3", *args, "--json")
    assert code == 0, err
    assert json.loads(stdout)["pad_token"] == {"before": None, "after": "<|reserved_special_token_0|>"}


def test_install_json(capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path) -> None:
    code, out, _ = run(
        capsys,
        "install",
        "llama3.2-pythonic",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["family"] == "llama3.2-pythonic" and doc["eos_token"]["after"] == "<|eot_id|>"
    assert (tmp_path / "out" / "chat_template.jinja").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["install", "nofamily", "--tokenizer", "{src}", "--output", "{out}"], "unknown family 'nofamily'"),
        (["install", "gigachat3", "--tokenizer", "{tmp}/missing", "--output", "{out}"], "no such folder"),
        (["install", "gigachat3", "--output", "{out}"], "missing --tokenizer"),
        (["install", "gigachat3", "--tokenizer", "{src}", "--output", "{out}", "--variant", "x"], "no variant 'x'"),
        (["install", "gigachat3", "--tokenizer", "{src}", "--output", "{out}", "--format", "yaml"], "Invalid value"),
        (["show", "gpt-oss", "--variant", "nope"], "no variant 'nope'"),
        (["base-tokenizer", "gpt2"], "unknown base tokenizer 'gpt2'"),
        (["nosuchcommand"], "No such command"),
    ],
)
def test_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    before = snapshot(toy_tokenizer)
    args = [a.format(src=toy_tokenizer, out=tmp_path / "out", tmp=tmp_path) for a in args]
    code, out, err = run(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and out == ""
    assert snapshot(toy_tokenizer) == before and not (tmp_path / "out").exists()


def test_template_that_fails_to_parse(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from hf_chat_templates.families.registry import _load_all

    configs = tmp_path / "configs"
    shutil.copytree(REPO_ROOT / "model_configs", configs)
    template = configs / "gemma3-tools" / "upstream.jinja"
    template.write_text(template.read_text().replace("{%- endif -%}", "", 1))
    monkeypatch.setenv("HF_CHAT_TEMPLATES_MODEL_CONFIGS", str(configs))
    _load_all.cache_clear()
    before = snapshot(toy_tokenizer)
    try:
        code, _, err = run(
            capsys, "install", "gemma3-tools", "--tokenizer", str(toy_tokenizer), "--output", str(tmp_path / "out")
        )
    finally:
        _load_all.cache_clear()
    assert code == 2
    assert f"{template}, line" in err and "does not parse" in err
    assert snapshot(toy_tokenizer) == before and not (tmp_path / "out").exists()


def test_verify_a_folder_whose_own_template_does_not_parse_names_the_file_and_line(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    """A published template with a syntax error (vLLM's DeepSeek V3.1 example wrote `{% set x = y | tojson}`): a
    clear error naming the file and the line, exit 2, never an internal error."""
    import shutil

    folder = tmp_path / "tok"
    shutil.copytree(toy_tokenizer, folder)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}\n{% set x = 1}{% endfor %}")
    code, _, err = run(capsys, "verify", str(folder))
    assert code == 2
    assert f"{folder / 'chat_template.jinja'}, line 2: the chat template does not parse" in err
    assert "internal error" not in err
