"""Training variants: spans by rendering differences, the derived {% generation %} template, and the assistant-mask
check failing on broken masks."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from hf_chat_templates import get_family, list_families
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.template.engines import render_minijinja
from hf_chat_templates.template.spans import Span, assistant_spans, token_mask
from hf_chat_templates.template.training_variant import derive_training_template, export_without_markers
from hf_chat_templates.tokenizer.folder import dump_json

from ..helpers import GOOD, build_toy_tokenizer, chatml_folder, check, context, marked, with_training

STOP = ["<|im_end|>"]
CONTROLS = ["<|im_start|>", "<|im_end|>"]


def chatml(messages: list[dict], add_generation_prompt: bool) -> str:
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


CONVERSATION = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Ciao"},
]


def test_spans_cover_content_and_stop_but_not_the_header_or_the_newline_after() -> None:
    found = assistant_spans(chatml, CONVERSATION, STOP, CONTROLS)
    text = found.text
    assert [text[s.start : s.end] for s in found.spans] == ["Hello<|im_end|>", "Ciao<|im_end|>"]
    assert [s.message for s in found.spans] == [1, 3]
    assert found.untrained == ()


def test_a_turn_that_closes_differently_when_last_ends_at_the_token_that_stands_in() -> None:
    def harmony_like(messages: list[dict], add_generation_prompt: bool) -> str:
        parts = []
        for i, m in enumerate(messages):
            close = "<|return|>" if m["role"] == "assistant" and i == len(messages) - 1 else "<|end|>"
            parts.append(f"<|start|>{m['role']}<|message|>{m['content']}{close}")
        return "".join(parts) + ("<|start|>assistant" if add_generation_prompt else "")

    found = assistant_spans(harmony_like, CONVERSATION, ["<|return|>"], ["<|start|>", "<|message|>", "<|end|>"])
    assert [found.text[s.start : s.end] for s in found.spans] == [
        "<|message|>Hello<|end|>",
        "<|message|>Ciao<|return|>",
    ]
    assert [s.closing for s in found.spans] == ["<|end|>", "<|return|>"]


def test_a_turn_rendered_differently_in_context_is_reported_not_guessed() -> None:
    def drops_history(messages: list[dict], add_generation_prompt: bool) -> str:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user") if messages else -1
        kept = [
            m if m["role"] != "assistant" or i > last_user else {**m, "content": "…"} for i, m in enumerate(messages)
        ]
        return chatml(kept, add_generation_prompt)

    found = assistant_spans(drops_history, CONVERSATION, STOP, CONTROLS)
    assert [s.message for s in found.spans] == [3]
    assert found.untrained == (
        (1, "its text through its stop token renders differently when it is not the last message"),
    )


def command_r7b_like(messages: list[dict], add_generation_prompt: bool) -> str:
    """Command R7B's way: every rendering ends with the next turn's header, generation prompt or not."""
    header = {"user": "<|USER_TOKEN|>", "assistant": "<|CHATBOT_TOKEN|><|START_RESPONSE|>"}
    close = {"user": "", "assistant": "<|END_RESPONSE|>"}
    turns = "".join(
        f"<|START_OF_TURN_TOKEN|>{header[m['role']]}{m['content']}{close[m['role']]}<|END_OF_TURN_TOKEN|>"
        for m in messages
    )
    return turns + "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"


def test_a_turn_followed_by_the_next_header_ends_at_its_stop_token() -> None:
    found = assistant_spans(command_r7b_like, CONVERSATION, ["<|END_OF_TURN_TOKEN|>"], [])
    assert [found.text[s.start : s.end] for s in found.spans] == [
        "<|START_RESPONSE|>Hello<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
        "<|START_RESPONSE|>Ciao<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
    ]
    assert [s.closing for s in found.spans] == ["<|END_OF_TURN_TOKEN|>"] * 2
    assert found.untrained == ()


def test_a_turn_whose_text_through_its_stop_changes_later_is_left_out_whatever_follows() -> None:
    def drops_history(messages: list[dict], add_generation_prompt: bool) -> str:
        last = len(messages) - 1
        kept = [m if m["role"] != "assistant" or i == last else {**m, "content": "…"} for i, m in enumerate(messages)]
        return command_r7b_like(kept, add_generation_prompt)

    found = assistant_spans(drops_history, CONVERSATION, ["<|END_OF_TURN_TOKEN|>"], [])
    assert [s.message for s in found.spans] == [3]
    assert found.untrained == (
        (1, "its text through its stop token renders differently when it is not the last message"),
    )


def test_a_span_without_a_stop_token_is_kept_with_no_closing() -> None:
    def no_stop(messages: list[dict], add_generation_prompt: bool) -> str:
        return chatml(messages, add_generation_prompt).replace("<|im_end|>", "")

    found = assistant_spans(no_stop, CONVERSATION[:2], STOP, CONTROLS)
    assert found.spans[0].closing is None


def test_token_mask_marks_every_token_that_overlaps_a_span() -> None:
    offsets = [(0, 2), (2, 5), (5, 7), (7, 9), (9, 12)]
    spans = (Span(1, 4, 7, "x"), Span(3, 11, 12, "y"))
    assert token_mask(offsets, spans) == [0, 1, 1, 0, 1]


def test_derived_template_renders_the_same_text_and_exports_the_original(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = chatml_folder(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(str(folder))
    training = derive_training_template(GOOD, STOP, CONTROLS)
    assert export_without_markers(training) == GOOD
    assert derive_training_template(training, STOP, CONTROLS) == training  # deriving twice changes nothing
    for flags in ({"add_generation_prompt": False}, {"add_generation_prompt": True}):
        messages = CONVERSATION if not flags["add_generation_prompt"] else CONVERSATION[:3]
        plain = tok.apply_chat_template(messages, chat_template=GOOD, tokenize=False, **flags)
        assert tok.apply_chat_template(messages, chat_template=training, tokenize=False, **flags) == plain
    out = tok.apply_chat_template(
        CONVERSATION, chat_template=training, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = tok.decode([i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m])
    assert trained == "Hello<|im_end|>Ciao<|im_end|>"


@pytest.mark.parametrize("family", [f.name for f in list_families()])
def test_the_export_renders_identically_in_minijinja(family: str) -> None:
    var = get_family(family).variant()
    exported = export_without_markers(derive_training_template(var.template, var.stop_tokens, var.control_tokens))
    assert exported == var.template
    assert "generation" not in exported.replace("add_generation_prompt", "")
    probe = next(p for p in build_probes() if p.id == "multi-turn")
    variables = {"bos_token": "<s>", "eos_token": "</s>", **var.kwarg_defaults}
    outs = [
        render_minijinja(
            t,
            probe.message_list(),
            None,
            add_generation_prompt=False,
            variables=variables,
            clock=datetime.datetime(2024, 1, 2),
        )
        for t in (var.template, exported)
    ]
    assert outs[0].ok and outs[0].text == outs[1].text


# ---- the check fails on broken masks --------------------------------------------------------------------------

PLAIN = marked(False, True).replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
PLAIN_PROBES = tuple(p for p in build_probes() if p.id in ("plain", "multi-turn", "generation-prompt"))


def test_assistant_mask_passes_on_a_correct_hand_written_training_template(tmp_path: Path) -> None:
    folder = with_training(chatml_folder(tmp_path / "tok"), marked(False, True))
    result = check(context(folder, PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "pass", result.message
    assert "the folder's training template" in result.message


# Command R7B's tool_use template, cut to its turns: the next turn's header closes every rendering.
COMMAND_R7B = (
    "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|># System Preamble<|END_OF_TURN_TOKEN|>"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ message.content }}"
    "<|END_OF_TURN_TOKEN|>"
    "{%- elif message.role == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ message.content }}<|END_OF_TURN_TOKEN|>"
    "{%- elif message.role == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>"
    "{{ message.content }}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>"
    "{%- endif %}"
    "{%- endfor %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
)
COMMAND_R7B_TOKENS = [
    "<|START_OF_TURN_TOKEN|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|CHATBOT_TOKEN|>",
    "<|START_RESPONSE|>",
    "<|END_RESPONSE|>",
]


def test_assistant_mask_trains_every_turn_of_a_template_that_writes_the_next_header(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from hf_chat_templates.tokenizer.vocab import register_control_tokens
    from hf_chat_templates.verification.context import VerifyContext

    folder = build_toy_tokenizer(tmp_path / "tok", add_bos=False)
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tj, _, _ = register_control_tokens(tj, COMMAND_R7B_TOKENS, reuse_reserved=False)
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    stops = ("<|END_OF_TURN_TOKEN|>",)
    ctx = VerifyContext(tokenizer, COMMAND_R7B, folder=None, probes=PLAIN_PROBES, stop_tokens=stops)
    result = check(ctx, "assistant-mask")
    assert result.status == "pass", result.message
    training = derive_training_template(COMMAND_R7B, stops, COMMAND_R7B_TOKENS)
    out = tokenizer.apply_chat_template(
        CONVERSATION, chat_template=training, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = tokenizer.decode([i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m])
    assert trained == "".join(f"<|START_RESPONSE|>{a}<|END_RESPONSE|><|END_OF_TURN_TOKEN|>" for a in ("Hello", "Ciao"))


def test_assistant_mask_fails_when_the_mask_misses_the_stop_token(tmp_path: Path) -> None:
    folder = with_training(chatml_folder(tmp_path / "tok"), marked(False, False))
    result = check(context(folder, PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "fail"
    assert "probe plain: the mask from the folder's training template leaves out token" in result.message
    assert "['<|im_end|>'] (message 1), which is the stop token of the generated part of message 1" in result.message
    assert result.detail["token_position"] > 0 and result.detail["message_index"] == 1


def test_assistant_mask_fails_when_the_mask_covers_the_role_header(tmp_path: Path) -> None:
    folder = with_training(chatml_folder(tmp_path / "tok"), marked(True, True))
    result = check(context(folder, PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "fail"
    assert "marks token" in result.message and "['<|im_start|>']" in result.message
    assert "which is the prompt before message 1's generated part (its role header)" in result.message


def test_assistant_mask_fails_when_the_training_template_renders_other_text(tmp_path: Path) -> None:
    folder = with_training(
        chatml_folder(tmp_path / "tok"), marked(False, True).replace("'\\n' -}}{%- else", "'\\n\\n' -}}{%- else")
    )
    result = check(context(folder, PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "fail"
    assert "the folder's training template renders differently from the template at char" in result.message
    assert "(message 1)" in result.message


def test_assistant_mask_fails_when_the_training_template_does_not_render(tmp_path: Path) -> None:
    training = marked(False, True).replace("{%- generation -%}", "{%- generation -%}{{ raise_exception('no') }}", 1)
    folder = with_training(chatml_folder(tmp_path / "tok"), training)
    result = check(context(folder, PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "fail"
    assert "probe plain: the folder's training template does not render: TemplateError: no" in result.message


def test_assistant_mask_compares_the_text_where_two_texts_give_the_same_ids(tmp_path: Path) -> None:
    """An end token that strips the whitespace after it encodes the training template's text without the newline
    to the same ids: the text itself still differs, and is reported."""
    folder = chatml_folder(tmp_path / "tok")
    tj = json.loads((folder / "tokenizer.json").read_text())
    next(t for t in tj["added_tokens"] if t["content"] == "<|im_end|>")["rstrip"] = True
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    without_newline = marked(False, True).replace("{{- '\\n' -}}{%- else", "{%- else", 1)
    assert without_newline != marked(False, True)
    result = check(context(with_training(folder, without_newline), PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "fail"
    assert "the folder's training template renders differently from the template at char" in result.message


def test_assistant_mask_fails_when_the_training_template_has_no_markers(tmp_path: Path) -> None:
    folder = with_training(chatml_folder(tmp_path / "tok"), PLAIN)
    result = check(context(folder, PLAIN, PLAIN_PROBES), "assistant-mask")
    assert result.status == "fail"
    assert "has no {% generation %} markers" in result.message


def test_assistant_mask_fails_when_a_turn_has_no_stop_token(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from hf_chat_templates.verification.context import VerifyContext

    folder = chatml_folder(tmp_path / "tok")
    no_stop = GOOD.replace("{{- '<|im_end|>\\n' -}}", "{{- '<|im_end|>\\n' if m.role != 'assistant' else '\\n' -}}")
    ctx = VerifyContext(
        AutoTokenizer.from_pretrained(str(folder)),
        no_stop,
        folder=None,
        probes=PLAIN_PROBES,
        stop_tokens=("<|im_end|>",),  # what a family config would declare
    )
    result = check(ctx, "assistant-mask")
    assert result.status == "fail"
    assert "probe plain: the generated part of message 1 holds no stop token (<|im_end|>)" in result.message
