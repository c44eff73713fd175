"""The token view and the HTML report: parse the HTML and check tokens, mask overlay and failure anchors against
the ids transformers gives."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hf_chat_templates import derive_training_template
from hf_chat_templates.verification.runner import verify_with_context
from hf_chat_templates.view.conversation import view_conversation
from hf_chat_templates.view.report import anchor_for, verification_html
from hf_chat_templates.view.terminal import to_terminal

from .test_cli import run
from .test_verify_checks import CONTROL, GOOD, chatml_folder

CONVERSATION = {"messages": [{"role": "user", "content": "Hi  there"}, {"role": "assistant", "content": "Hello\tyou"},
                             {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Ciao"}]}


class Tokens(HTMLParser):
    """Collects every token span: its attributes and its text, per view."""

    def __init__(self) -> None:
        super().__init__()
        self.views: list[list[dict]] = []
        self.ids: dict[str, dict] = {}
        self._depth = 0
        self._current: dict | None = None
        self._external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag in ("script", "link", "img") or (tag == "style" and a.get("src")):
            self._external.append(tag)
        if "id" in a:
            self.ids[a["id"]] = a
        classes = (a.get("class") or "").split()
        if tag == "div" and "view" in classes:
            self.views.append([])
        if tag == "span" and "t" in classes and "data-i" in a:
            self._current = {**a, "classes": classes, "text": ""}
            self.views[-1].append(self._current)
            self._depth = 1
        elif tag == "span" and self._current is not None:
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._current is not None:
            self._depth -= 1
            if self._depth == 0:
                self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current["text"] += data


def parse(page: str) -> Tokens:
    parser = Tokens()
    parser.feed(page)
    return parser


@pytest.fixture
def chatml(tmp_path: Path) -> Path:
    return chatml_folder(tmp_path / "tok")


def test_view_html_tokens_and_mask_match_transformers(chatml: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATION))
    _, page = view_conversation(str(chatml), messages, html=True)
    assert page is not None
    parsed = parse(page)
    assert parsed._external == []  # one self-contained file
    assert "http" not in page.replace("http-equiv", "")
    (tokens,) = parsed.views
    tok = AutoTokenizer.from_pretrained(str(chatml))
    training = derive_training_template(GOOD, ["<|im_end|>"], CONTROL)
    out = tok.apply_chat_template(CONVERSATION["messages"], chat_template=training, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
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


def test_diff_with_another_variant_aligns_both_sides(installed_variants: dict, tmp_path: Path) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                                 {"role": "assistant", "content": "Hello there."}]}))
    source = installed_variants[("gemma3-tools", "corrected")]
    text, page = view_conversation(str(source), messages, family="gemma3-tools", diff_with="upstream", html=True,
                                   color=False)
    assert "they part ways at token" in text
    parsed = parse(page or "")
    left, right = parsed.views
    first = next(t for t in left if "here" in t["classes"])
    assert "first-difference" in parsed.ids and parsed.ids["first-difference"]["data-i"] == first["data-i"]
    i = int(first["data-i"])
    assert [t["data-id"] for t in left[:i]] == [t["data-id"] for t in right[:i]]
    assert left[i]["data-id"] != right[i]["data-id"]


def test_verify_html_anchors_each_failure_at_its_token(installed_variants: dict) -> None:
    source = installed_variants[("gemma3-tools", "upstream")]
    report, ctx = verify_with_context(source, family="gemma3-tools", variant="upstream")
    page = verification_html([(report, ctx)])
    parsed = parse(page)
    failing = [c for c in report.checks if c.status == "fail"]
    assert {c.id for c in failing} == {"nothing-dropped", "completion-matches-content"}
    for check in failing:
        anchor = anchor_for(report, check.id)
        assert f'href="#{anchor}"' in page
        assert anchor in parsed.ids
    # completion-matches-content: both sides aligned; the anchored token is where the stray newline is
    marked = parsed.ids[anchor_for(report, "completion-matches-content")]
    assert marked["data-side"] == "left"
    ids = ctx.probe_token_ids(ctx.probe(failing[1].probe or "plain"))
    newline = ctx.tokenizer.encode("\n", add_special_tokens=False)
    assert ids[int(marked["data-i"])] in newline + ctx.tokenizer.encode("\n<end_of_turn>", add_special_tokens=False)


@pytest.mark.parametrize("check_id", ["reference-parity"])
def test_verify_html_aligns_the_official_renderer(check_id: str, installed_variants: dict) -> None:
    source = installed_variants[("llama3.2-pythonic", "upstream")]
    report, ctx = verify_with_context(source, family="llama3.2-pythonic", variant="upstream", only=[check_id])
    check = report.check(check_id)
    assert check.status == "fail"
    parsed = parse(verification_html([(report, ctx)]))
    left, right = parsed.views[:2]
    anchored = parsed.ids[anchor_for(report, check_id)]
    assert int(anchored["data-i"]) == check.detail["token_position"]
    assert [t["data-id"] for t in left if "here" in t["classes"]] == [anchored["data-id"]]
    assert right and all(t.get("data-side") == "right" for t in right)


def test_cli_view_and_verify_html(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps(CONVERSATION))
    code, out, err = run(capsys, "view", str(chatml), "--messages", str(messages), "--html", str(tmp_path / "v.html"))
    assert code == 0, err
    assert "tokens," in out and (tmp_path / "v.html").read_text().startswith("<!doctype html>")
    code, out, err = run(capsys, "verify", str(chatml), "--html", str(tmp_path / "r.html"))
    assert "report written" in err and parse((tmp_path / "r.html").read_text()).views


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ('{"messages": [{"content": "x"}]}', "message 0 has no 'role'"),
])
def test_cli_view_rejects_a_bad_messages_file(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                              content: str, message: str) -> None:
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
