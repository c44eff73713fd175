"""A corpus of broken tokenizer folders: each gives one clear error (file, key or line, reason), exit code 2, and
leaves every input file byte-identical."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ..helpers import run, snapshot


def _edit_json(folder: Path, name: str, change: Callable[[dict], None]) -> None:
    data = json.loads((folder / name).read_text(encoding="utf-8"))
    change(data)
    (folder / name).write_text(json.dumps(data), encoding="utf-8")


def truncated_tokenizer_json(folder: Path) -> None:
    data = (folder / "tokenizer.json").read_bytes()
    (folder / "tokenizer.json").write_bytes(data[: len(data) // 2])


def config_not_an_object(folder: Path) -> None:
    (folder / "tokenizer_config.json").write_text('"just a string"')


def added_token_past_the_vocabulary(folder: Path) -> None:
    def change(tj: dict) -> None:
        tj["added_tokens"].append(
            {
                "id": 10**6,
                "content": "<|far|>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )

    _edit_json(folder, "tokenizer.json", change)


def added_token_with_a_mismatched_id(folder: Path) -> None:
    def change(tj: dict) -> None:
        piece = next(p for p in tj["model"]["vocab"] if p.isalpha() and len(p) > 3)
        tj["added_tokens"].append(
            {
                "id": 5,
                "content": piece,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )

    _edit_json(folder, "tokenizer.json", change)


def added_token_listed_twice(folder: Path) -> None:
    _edit_json(folder, "tokenizer.json", lambda tj: tj["added_tokens"].append(dict(tj["added_tokens"][0])))


def model_missing(folder: Path) -> None:
    _edit_json(folder, "tokenizer.json", lambda tj: tj.pop("model"))


def symlink_out_of_the_folder(folder: Path) -> None:
    secret = folder.parent / "secret.txt"
    secret.write_text("do not publish")
    os.symlink(secret, folder / "special_tokens_map.json")


def template_not_utf8(folder: Path) -> None:
    (folder / "chat_template.jinja").write_bytes(b"{{ bos_token }}\xff\xfe")


def config_not_utf8(folder: Path) -> None:
    (folder / "tokenizer_config.json").write_bytes(b'{"eos_token": "\xff"}')


CASES = [
    (truncated_tokenizer_json, "tokenizer.json, line"),
    (config_not_an_object, "tokenizer_config.json: expected a JSON object at the top level, found str"),
    (added_token_past_the_vocabulary, "has id 1000000, but the ids after the model vocabulary"),
    (added_token_with_a_mismatched_id, "has id 5 but the model vocabulary gives it id"),
    (added_token_listed_twice, "is listed twice"),
    (model_missing, "tokenizer.json: key 'model' is missing or not an object"),
    (symlink_out_of_the_folder, "special_tokens_map.json: a symlink to"),
    (template_not_utf8, "chat_template.jinja: not UTF-8 (byte 15)"),
    (config_not_utf8, "tokenizer_config.json: not UTF-8"),
]


@pytest.mark.parametrize(("damage", "message"), CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("command", ["install", "verify"])
def test_bad_folder(
    capsys: pytest.CaptureFixture[str],
    toy_tokenizer: Path,
    tmp_path: Path,
    damage: Callable[[Path], None],
    message: str,
    command: str,
) -> None:
    damage(toy_tokenizer)
    before = snapshot(toy_tokenizer)
    args = (
        ["install", "gigachat3", "--tokenizer", str(toy_tokenizer), "--output", str(tmp_path / "out")]
        if command == "install"
        else ["verify", str(toy_tokenizer), "--family", "gigachat3"]
    )
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    assert message in err and "Traceback" not in err
    assert snapshot(toy_tokenizer) == before
    assert not (tmp_path / "out").exists()
