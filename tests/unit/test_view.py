"""The token view and the HTML report on the toy tokenizer: parse the HTML and check tokens, mask overlay and visible
whitespace against the ids transformers gives; the terminal view; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import derive_training_template
from hf_chat_templates.view.conversation import view_conversation
from hf_chat_templates.view.terminal import to_terminal

from ..helpers import CONTROL, GOOD, parse_view, run

CONVERSATION = {
    "messages": [
        {"role": "user", "content": "Hi  there"},
        {"role": "assistant", "content": "Hello\tyou"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Ciao"},
    ]
}


def test_view_html_tokens_and_mask_match_transformers(chatml: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATION))
    _, page = view_conversation(str(chatml), messages, html=True)
    assert page is not None
    parsed = parse_view(page)
    assert parsed._external == []  # one self-contained file
    assert "http" not in page.replace("http-equiv", "")
    (tokens,) = parsed.views
    tok = AutoTokenizer.from_pretrained(str(chatml))
    training = derive_training_template(GOOD, ["<|im_end|>"], CONTROL)
    out = tok.apply_chat_template(
        CONVERSATION["messages"],
        chat_template=training,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert [int(t["data-id"]) for t in tokens] == out["input_ids"]
    assert [int("m" in t["classes"]) for t in tokens] == out["assistant_masks"]
    control = tok.convert_tokens_to_ids(CONTROL)
    assert [int(t["data-id"]) for t in tokens if "c" in t["classes"]] == [i for i in out["input_ids"] if i in control]
    assert all(t["title"].startswith(f"token {t['data-i']} · id {t['data-id']}") for t in tokens)
    text = "".join(t["text"] for t in tokens)
    assert "Hi··there" in text and "Hello→you" in text and "↵" in text  # whitespace made visible


def test_terminal_view_plain_and_color(chatml: Path, tmp_path: Path) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATION))
    plain, _ = view_conversation(str(chatml), messages, width=40, color=False)
    assert "⟦<|im_start|>⟧|user|↵|" in plain
    assert all(len(line) <= 40 for line in plain.splitlines()[1:] if "⟦" not in line or len(line) <= 40)
    under = plain.splitlines()
    assert under[-2] == "C|i|a|o|⟦<|im_end|>⟧|↵|"
    assert under[-1] == "^ ^ ^ ^ ^^^^^^^^^^^^"  # the mask row: under the answer and its stop token, not the ↵
    colored, _ = view_conversation(str(chatml), messages, color=True, width=80)
    assert "\x1b[" in colored and "⟦" not in colored  # colour sets control tokens apart, not brackets
    with_ids, _ = view_conversation(str(chatml), messages, color=False, ids=True)
    assert "o(" in with_ids and ")|" in with_ids


def test_cli_view_and_verify_html(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATION))
    code, out, err = run(capsys, "view", str(chatml), "--messages", str(messages), "--html", str(tmp_path / "v.html"))
    assert code == 0, err
    assert "tokens," in out and (tmp_path / "v.html").read_text().startswith("<!doctype html>")
    code, out, err = run(capsys, "verify", str(chatml), "--html", str(tmp_path / "r.html"))
    assert "report written" in err and parse_view((tmp_path / "r.html").read_text()).views


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        ('{"messages": [{"content": "x"}]}', "message 0 has no 'role'"),
    ],
)
def test_cli_view_rejects_a_bad_messages_file(
    chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture, content: str, message: str
) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(content)
    code, _, err = run(capsys, "view", str(chatml), "--messages", str(messages), "--html", str(tmp_path / "v.html"))
    assert code == 2 and message in err and str(messages) in err and "Traceback" not in err
    assert not (tmp_path / "v.html").exists()


def test_to_terminal_fits_the_width(chatml: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from hf_chat_templates.view.tokens import token_view

    tok = AutoTokenizer.from_pretrained(str(chatml))
    view = token_view(tok, "word " * 60, title="long")
    lines = to_terminal(view, width=30, color=False).splitlines()[1:]
    assert len(lines) > 5 and all(len(line) <= 30 for line in lines)
