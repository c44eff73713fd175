"""`load_tokenizer`: a plain TokenizersBackend folder loads without AutoTokenizer, as AutoTokenizer would load it;
any folder where AutoTokenizer could pick another class goes through AutoTokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from hf_chat_templates.tokenizer.folder import load_tokenizer, read_folder

from ..helpers import build_toy_tokenizer, spy


def _state(tokenizer: Any) -> tuple[Any, ...]:
    return (
        type(tokenizer),
        tokenizer.init_kwargs,
        tokenizer.special_tokens_map,
        {i: str(t) for i, t in tokenizer.added_tokens_decoder.items()},
        tokenizer.chat_template,
        tokenizer.backend_tokenizer.to_str(),
    )


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    folder = build_toy_tokenizer(tmp_path / "tok")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("declared", ["TokenizersBackend", "PreTrainedTokenizerFast"])
def test_a_plain_folder_loads_as_autotokenizer_loads_it_without_it(
    plain: Path, declared: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = json.loads((plain / "tokenizer_config.json").read_text())
    (plain / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": declared}))
    expected = _state(AutoTokenizer.from_pretrained(str(plain)))

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("AutoTokenizer was used")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refused)
    assert _state(load_tokenizer(plain, read_folder(plain))) == expected


@pytest.mark.parametrize(
    ("config_change", "extra_file"),
    [
        ({"tokenizer_class": "GPT2Tokenizer"}, None),
        ({"auto_map": {"AutoTokenizer": [None, "tok.MyTokenizer"]}}, None),
        ({}, ("config.json", {"model_type": "gpt2"})),
        ({"tokenizer_class": None}, None),
    ],
    ids=["another-class", "auto-map", "config-json", "no-class"],
)
def test_a_folder_autotokenizer_may_load_otherwise_goes_through_it(
    plain: Path, config_change: dict[str, Any], extra_file: tuple[str, Any] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {k: v for k, v in json.loads((plain / "tokenizer_config.json").read_text()).items()}
    config.update(config_change)
    (plain / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    if extra_file is not None:
        (plain / extra_file[0]).write_text(json.dumps(extra_file[1]))
    calls: list[str] = []
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda path, **kwargs: calls.append(path) or "auto")
    assert load_tokenizer(plain, read_folder(plain)) == "auto"
    assert calls == [str(plain)]


def test_a_source_not_read_goes_through_autotokenizer(plain: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda path, **kwargs: "auto")
    assert load_tokenizer(plain, None) == "auto"


def test_a_tokenizer_json_checked_before_is_not_parsed_again_and_a_bad_one_always_fails(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hf_chat_templates.errors import TokenizerFolderError
    from hf_chat_templates.tokenizer import folder as module

    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    checked = spy(monkeypatch, module, "_checked_tokenizer_json")
    first = read_folder(plain)
    assert [path for path, _ in checked] == [plain / "tokenizer.json"] and first.parsed_tokenizer_json is not None
    again = read_folder(plain)
    assert len(checked) == 1 and again.parsed_tokenizer_json is None  # its record read, the file not parsed
    assert again.added_tokens == first.added_tokens and again.added_tokens
    assert again.tokenizer_json == first.tokenizer_json and len(checked) == 2  # parsed, and checked, when asked for
    # a file changed after it was read is checked when parsed
    tj = json.loads((plain / "tokenizer.json").read_text())
    tj["added_tokens"].append(dict(tj["added_tokens"][0]))  # the same token twice
    broken = read_folder(plain)
    (plain / "tokenizer.json").write_text(json.dumps(tj))
    twice = r"tokenizer\.json: added_tokens\[6\] '<unk>' is listed twice$"
    with pytest.raises(TokenizerFolderError, match=twice):
        broken.tokenizer_json  # noqa: B018
    for _ in range(2):  # a file that does not pass is never recorded
        with pytest.raises(TokenizerFolderError, match=twice):
            read_folder(plain)
    (plain / "tokenizer.json").write_text("{ not json")
    for _ in range(2):
        with pytest.raises(TokenizerFolderError, match="invalid JSON"):
            read_folder(plain)


def _record(cache: Path) -> Path:
    (record,) = (cache / "checked-tokenizers").iterdir()
    return record


@pytest.mark.parametrize(
    ("damage", "written_by_keep"),
    [
        ("{ not json", True),
        ('{"added_tokens": {}}', True),
        ('{"added_tokens": [{"id": "1", "content": "<x>"}]}', True),
        ('{"other": 1}', True),
        ('{"added_tokens": []}', False),  # well formed, but not what was written: its sha256 does not match
    ],
    ids=["not-json", "not-a-list", "id-not-int", "no-key", "changed-by-hand"],
)
def test_a_damaged_record_is_not_trusted(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, written_by_keep: bool
) -> None:
    from hf_chat_templates.tokenizer import folder as module
    from hf_chat_templates.tokenizer.cache_folder import keep, read_kept

    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    first = read_folder(plain)
    record = _record(tmp_path / "cache")
    keep(record, damage.encode()) if written_by_keep else record.write_text(damage)
    checked = spy(monkeypatch, module, "_checked_tokenizer_json")
    again = read_folder(plain)
    assert len(checked) == 1 and again.added_tokens == first.added_tokens  # parsed and checked again
    assert json.loads(read_kept(record) or b"")["added_tokens"] == first.added_tokens  # record mended


def test_added_tokens_any_json_string_can_hold_are_recorded(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone surrogate (`"\\ud800"` in the file) cannot be written as UTF-8: the record escapes it."""
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    tj = json.loads((plain / "tokenizer.json").read_text())
    tj["added_tokens"][-1]["content"] = "<odd\ud800>"
    (plain / "tokenizer.json").write_text(json.dumps(tj))
    first = read_folder(plain)
    assert read_folder(plain).added_tokens == first.added_tokens and first.added_tokens[-1]["content"] == "<odd\ud800>"
    assert [p.name for p in (tmp_path / "cache" / "checked-tokenizers").iterdir()] == [_record(tmp_path / "cache").name]


def test_a_cache_that_cannot_be_named_or_written_means_parsing_every_time(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hf_chat_templates.tokenizer import folder as module

    checked = spy(monkeypatch, module, "_checked_tokenizer_json")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "file"))  # a file where the folder should be
    assert read_folder(plain).added_tokens and read_folder(plain).added_tokens and len(checked) == 2

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("HF_CHAT_TEMPLATES_CACHE")
    monkeypatch.setattr(Path, "home", no_home)
    assert read_folder(plain).added_tokens and len(checked) == 3


def test_a_tokenizer_json_gone_when_first_asked_for_is_a_clear_error(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hf_chat_templates.errors import TokenizerFolderError

    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    read_folder(plain)
    again = read_folder(plain)
    (plain / "tokenizer.json").unlink()
    with pytest.raises(TokenizerFolderError, match="could not be read again") as caught:
        again.tokenizer_json  # noqa: B018
    assert "run the command again" in str(caught.value.hint)
