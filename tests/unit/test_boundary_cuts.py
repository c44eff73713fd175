"""boundary-merge by where the merged token lies (an error only across a cut point: a trained span's start or end, a
generation prompt's end; info in untrained text tokenized the same at inference), and completion-matches-content on
templates with no stop token (the answer's text up to where the next turn begins is still the content)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates.conversations.probes import Probe
from hf_chat_templates.tokenizer.folder import dump_json

from ..helpers import chatml_folder, check, context
from .test_published_defects import LEGITIMATE

# The user's text and the next turn's header share no cut: the header is the generation prompt's, never trained
HEADER_AFTER_USER = (
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{{ m.content }}{%- else -%}x\nAssistant: {{ m.content }}"
    "<|im_end|>\n{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}x\nAssistant: {%- endif -%}"
)
# No stop token: the answer's last text and the next turn's first share a token at the trained span's end
NO_STOP = (
    "{%- for m in messages -%}{%- if m.role == 'user' -%}x\nUser: {{ m.content }}\nAssistant: {%- else -%}"
    "{{ m.content }}{%- endif -%}{%- endfor -%}"
)


def test_a_merge_in_untrained_text_is_info(good: Path) -> None:
    probe = Probe(
        "split-header", ({"role": "user", "content": "The quick brown fo"}, {"role": "assistant", "content": "Yes"})
    )
    result = check(context(good, HEADER_AFTER_USER, probes=(probe,)), "boundary-merge")
    assert result.status == "info", result.message
    assert "spans the boundary between message 0 and 1 at char 18" in result.message
    assert "not trained and that a request tokenizes the same way" in result.message


def test_a_merge_across_a_trained_spans_end_fails(good: Path) -> None:
    probe = Probe(
        "split-answer",
        (
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "The quick brown fo"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "Yes"},
        ),
    )
    ctx = context(good, NO_STOP, probes=(probe,))
    result = check(ctx, "boundary-merge")
    assert result.status == "fail", result.message
    assert "spans the boundary between message 1 and 2" in result.message
    assert "where the trained part or the generation prompt is cut" in result.message
    assert result.detail["message_index"] == 2 and result.detail["cut"] == result.detail["char_position"]


def _merging_newlines(folder: Path) -> Path:
    """The toy tokenizer with one more merge, `\n\n` as one token (as Llama 3's and most byte-level BPEs have)."""
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    model = tj["model"]
    new_id = 1 + max([*model["vocab"].values(), *(e["id"] for e in tj["added_tokens"])])
    model["vocab"]["\u010a\u010a"] = new_id
    model["merges"].append(
        ["\u010a", "\u010a"] if model["merges"] and isinstance(model["merges"][0], list) else "\u010a \u010a"
    )
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    return folder


def test_an_answers_own_leading_whitespace_merging_with_the_prompt_is_info(tmp_path: Path) -> None:
    folder = _merging_newlines(chatml_folder(tmp_path / "tok"))
    template = (
        "{%- for m in messages -%}{%- if m.role == 'user' -%}"
        "{{ '<|im_start|>user\\n' + m.content + '<|im_end|>\\n<|im_start|>assistant\\n' }}"
        "{%- else -%}{{ m.content + '<|im_end|>\\n' }}{%- endif -%}{%- endfor -%}"
    )
    probe = Probe("lead", ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\n\nIndented"}))
    ctx = context(folder, template, probes=(probe,))
    result = check(ctx, "boundary-merge")
    assert result.status == "info", result.message
    assert "message 1 starts with whitespace" in result.message
    assert "strip leading whitespace" in (result.hint or "")


@pytest.mark.parametrize(("name", "template", "known"), LEGITIMATE, ids=[n for n, _, _ in LEGITIMATE])
def test_legitimate_templates_have_no_merge_error(good: Path, name: str, template: str, known: frozenset[str]) -> None:
    result = check(context(good, template), "boundary-merge")
    assert "boundary-merge" in known or result.severity != "error", (name, result.message)


# ---- completion-matches-content with no stop token ---------------------------------------------------------------

PLAIN_NO_STOP = (
    "{%- for m in messages -%}{{ '###' + m.role + ': ' + m.content + '\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '###assistant: ' }}{%- endif -%}"
)
PROBE = Probe("spaced", ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "  Fine, thanks.\n"}))


def test_no_stop_token_still_compares_the_answer_with_the_content(good: Path) -> None:
    ctx = context(good, PLAIN_NO_STOP.replace("+ m.content +", "+ m.content | trim +"), probes=(PROBE,))
    assert ctx.stop_tokens == ()
    result = check(ctx, "completion-matches-content")
    assert result.status == "fail", result.message
    assert "the trained completion is the content trimmed" in result.message and "leading" in result.message


def test_no_stop_token_reports_a_rewritten_answer(good: Path) -> None:
    ctx = context(good, PLAIN_NO_STOP.replace("+ m.content +", "+ m.content | upper +"), probes=(PROBE,))
    result = check(ctx, "completion-matches-content")
    assert result.status == "fail" and "is not the content" in result.message


def test_no_stop_token_passes_an_answer_written_as_given(good: Path) -> None:
    result = check(context(good, PLAIN_NO_STOP, probes=(PROBE,)), "completion-matches-content")
    assert result.status == "pass", result.message
    assert "no stop token is known" in result.message
