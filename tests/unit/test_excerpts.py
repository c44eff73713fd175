"""The excerpts findings quote (`around`): their edges never cut a control token or a character of several code
points in two, and a check's message quotes whole tokens."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hf_chat_templates.verification.results import around, excerpt_bounds

from ..helpers import check, context

EXAMPLES = int(os.environ.get("HF_CHAT_TEMPLATES_HYPOTHESIS_EXAMPLES", "40"))
CHATML = "<|im_start|>user\nHello there, friend<|im_end|>\n<|im_start|>assistant\nHi<|im_end|>\n"
DEEPSEEK = "<｜User｜>What is two plus two?<｜Assistant｜>Four, of course.<｜end▁of▁sentence｜>"


def test_an_edge_inside_a_control_token_moves_to_its_end() -> None:
    # width 11 around "Hi": the bare window would start inside <|im_start|> and end inside <|im_end|>
    pos = CHATML.index("Hi")
    assert CHATML[pos - 11 : pos + 11] == ">assistant\nHi<|im_end|"  # what the window alone would quote
    excerpt = around(CHATML, pos, width=11)
    assert excerpt == "…<|im_start|>assistant\\n⟨here⟩Hi<|im_end|>…"


def test_fullwidth_tokens_are_whole() -> None:
    pos = DEEPSEEK.index("Four")
    excerpt = around(DEEPSEEK, pos, width=12)
    assert "<｜Assistant｜>" in excerpt and "<｜end▁of▁sentence｜>" not in excerpt
    excerpt = around(DEEPSEEK, DEEPSEEK.index("course"), width=12)
    assert excerpt.endswith("<｜end▁of▁sentence｜>") and "…▁of" not in excerpt


def test_tokens_of_any_shape_are_whole_when_the_caller_names_them() -> None:
    text = "user: hello END_OF_TURN assistant: hi END_OF_TURN"
    pos = text.index("assistant")
    assert around(text, pos, width=6) == "…_TURN·⟨here⟩assist…"  # not token-shaped: only the caller knows it
    assert around(text, pos, ("END_OF_TURN",), width=6) == "…END_OF_TURN·⟨here⟩assist…"


def test_plain_text_keeps_its_width() -> None:
    text = "The quick brown fox jumps over the lazy dog and keeps running far away"
    pos = text.index("jumps")
    assert around(text, pos, width=8) == "…own·fox·⟨here⟩jumps·ov…"
    # JSON and markup with quotes or spaces are not tokens: the window stays as it is
    data = "x" * 30 + '["alpha","beta"]' + "y" * 30
    assert excerpt_bounds(data, 33, 40) == (33, 40)


def test_characters_of_several_code_points_are_whole() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji of five code points
    text = "ab" + family + "cd"
    for cut in range(3, 7):
        start, end = excerpt_bounds(text, cut, cut)
        assert (start, end) == (2, 7)
    accented = "cafe\u0301 noir"  # e + combining acute accent
    assert excerpt_bounds(accented, 0, 4) == (0, 5)
    flags = "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea"  # two flags, two regional indicators each
    assert excerpt_bounds(flags, 1, 3) == (0, 4) and excerpt_bounds(flags, 2, 2) == (2, 2)
    pair = "a\ud83e\udd99b"  # a surrogate pair kept as two code points (decoded with surrogatepass)
    assert excerpt_bounds(pair, 2, 2) == (1, 3)
    assert excerpt_bounds("line\r\nnext", 5, 5) == (4, 6)


def test_a_position_outside_the_text_is_clamped() -> None:
    assert around("abc", -1) == "⟨here⟩abc" and around("abc", 10) == "abc⟨here⟩"


TOKENS = ["<|im_start|>", "<|im_end|>", "<｜end▁of▁sentence｜>", "[INST]", "</s>", "END_OF_TURN"]


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(TOKENS), st.text(min_size=1, max_size=8)), min_size=1, max_size=20),
    st.data(),
)
def test_no_edge_ever_splits_a_named_token(pieces: list[str], data: st.DataObject) -> None:
    text = "".join(pieces)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    lo, hi = excerpt_bounds(text, start, end, TOKENS)
    assert lo <= start and hi >= end
    for token in TOKENS:
        at = text.find(token)
        while at >= 0:
            assert not at < lo < at + len(token) and not at < hi < at + len(token), (token, at, lo, hi)
            at = text.find(token, at + 1)


def test_a_check_quotes_whole_control_tokens(good: Path) -> None:
    # A date two chars after <|im_start|>system: the deterministic check quotes 24 chars before it, which would
    # start inside the token
    template = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' -}}"
        "{%- if loop.first -%}{{- 'Today: ' + strftime_now('%Y-%m-%d') + ' ' -}}{%- endif -%}"
        "{{- m.content if m.content is string else '' -}}{{- '<|im_end|>\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    result = check(context(good, template), "deterministic")
    assert result.status == "warn"  # today's date, which no kwarg pins
    assert "<|im_start|>user\\nToday:" in result.message
    assert "…im_start" not in result.message and "…_start" not in result.message and "…|>" not in result.message
