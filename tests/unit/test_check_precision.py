"""Findings name their real cause, once: the data's leading whitespace merging with a role header is noted by
`assistant-mask` alone while text the template writes still fails; inferred tokens that a tokenizer writes as text,
sentinels a template only compares with and tokens assembled from roles no probe renders are not asserted; Kimi's
eos outside the generation stops, BOS opening every message, and the probes for a later system message and
`reasoning_content: null`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.tokenizer.folder import dump_json
from hf_chat_templates.tokenizer.vocab import register_control_tokens

from .. import helpers
from ..helpers import GOOD, chatml_folder, check, context

UNSEEN = Path(__file__).resolve().parent.parent / "data" / "unseen"


@pytest.fixture(scope="module")
def merging(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The baseline on a toy tokenizer that merges blank lines ("\\n\\n" is one token), as Llama 3's does."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helpers, "TOY_TEXT", helpers.TOY_TEXT + "one\n\ntwo\n\n  three\n\n" * 40)
        return chatml_folder(tmp_path_factory.mktemp("merging") / "tok")


# A template that writes a newline of its own before each answer: the header's "\n" and its "\n" merge.
TEMPLATE_NEWLINE = GOOD.replace(
    "{%- if m.content is string -%}{{- m.content -}}",
    "{%- if m.content is string -%}{{- ('\\n' if m.role == 'assistant' else '') + m.content -}}",
)


def test_the_datas_leading_whitespace_is_noted_once_by_assistant_mask(merging: Path) -> None:
    ctx = context(merging)
    assert len(ctx.tokenizer.tokenize("assistant\n\n  x")) < len(ctx.tokenizer.tokenize("assistant\n  x")) + 1
    mask = check(ctx, "assistant-mask")
    assert mask.status == "info", mask.message
    notes = [f for f in mask.findings if f.probe == "whitespace"]
    assert notes and notes[0].severity == "info" and notes[0].cause == "input normalization"
    assert "message 1's content starts with whitespace" in notes[0].text
    assert "the mask boundary falls inside a token" in notes[0].text and "this is the data" in notes[0].text
    assert check(ctx, "prefix-stable").status == "pass"


def test_a_newline_the_template_writes_after_the_header_still_fails(merging: Path) -> None:
    ctx = context(merging, TEMPLATE_NEWLINE)
    mask = check(ctx, "assistant-mask")
    assert mask.status == "warn"
    assert "the template writes '\\\\n' after the role header" in mask.message
    stable = check(ctx, "prefix-stable")
    assert stable.status == "fail"
    assert "the template writes text after the generation prompt that joins its last token" in stable.message


def test_the_toy_tokenizer_merges_no_blank_lines(good: Path) -> None:
    """The baseline tokenizer splits "\\n\\n": neither check has anything to say on it."""
    ctx = context(good)
    assert check(ctx, "assistant-mask").status == "pass" and check(ctx, "prefix-stable").status == "pass"


# Mixtral's format: [INST] as text, </s> the eos.
INST = (
    "{{- bos_token -}}{%- for m in messages -%}{%- if m.role == 'user' -%}{{- '[INST] ' + m.content + ' [/INST]' -}}"
    "{%- elif m.role == 'assistant' -%}{{- ' ' + m.content + eos_token -}}{%- endif -%}{%- endfor -%}"
)


def test_an_inferred_bracket_token_the_tokenizer_writes_as_text_is_info(good: Path) -> None:
    result = check(context(good, INST), "control-tokens-atomic")
    assert result.status == "info", result.message
    assert result.message.startswith("[INST] is not one token")
    assert "written as text by this tokenizer; if the model was trained with it as one token, declare it with " in (
        result.message
    )
    assert "--control-token [INST]" in result.message


def test_an_inferred_mistral_control_name_in_pieces_fails(good: Path) -> None:
    # Mistral Nemo's way: [TOOL_CALLS] (an upper-case name with an underscore, in brackets) is a control token in
    # every Mistral tokenizer that writes it; in pieces, tool calls are trained as text
    calls = INST.replace(
        "{{- ' ' + m.content + eos_token -}}",
        "{%- if m.tool_calls -%}{{- '[TOOL_CALLS]' + m.tool_calls | tojson + eos_token -}}"
        "{%- else -%}{{- ' ' + m.content + eos_token -}}{%- endif -%}",
    )
    result = check(context(good, calls), "control-tokens-atomic")
    assert result.status == "fail", result.message
    named = " ".join([result.message, *(e["message"] for e in result.detail.get("examples", []))])
    assert "[TOOL_CALLS] is not one token" in named


def test_a_declared_bracket_token_in_pieces_fails(good: Path) -> None:
    result = check(context(good, INST, control_tokens=["[INST]"]), "control-tokens-atomic")
    assert result.status == "fail" and result.message.startswith("[INST] is not one token")


def test_a_piped_token_in_pieces_fails_whether_declared_or_not(tmp_path: Path) -> None:
    result = check(context(chatml_folder(tmp_path / "tok", register=False)), "control-tokens-atomic")
    assert result.status == "fail" and result.message.startswith("<|im_start|> is not one token")


# Zephyr's format: <|user|>, <|assistant|> as text, every answer closed with the eos </s>.
ZEPHYR = (
    "{%- for m in messages -%}{{- '<|' + m.role + '|>\\n' + m.content + eos_token + '\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)


def test_piped_markers_the_tokenizer_holds_none_of_before_its_own_eos_are_text(good: Path) -> None:
    result = check(context(good, ZEPHYR), "control-tokens-atomic")
    assert result.status == "info", result.message
    assert result.message.startswith("<|assistant|> is not one token")
    assert "the tokenizer registers none of the template's <|…|> markers (" in result.message
    assert "every assistant turn ends with its registered stop token </s>: the model reads them as text" in (
        result.message
    )
    assert "declare it with --control-token <|assistant|>" in result.message
    assert {f.severity for f in result.findings} == {"info"}


@pytest.mark.parametrize(
    ("template", "registered"),
    [
        # ChatML's markers are special tokens by the format's definition, even before the eos
        (GOOD.replace("'<|im_end|>\\n'", "'<|im_end|>' + eos_token + '\\n'"), []),
        # one marker registered and another not: one forgotten
        (ZEPHYR, ["<|assistant|>"]),
        # earlier answers end with no stop token: nothing but the marker ends them (phi-3's way)
        (ZEPHYR.replace("m.content + eos_token + '\\n'", "m.content + '<|end|>\\n'") + "{{- eos_token -}}", []),
    ],
    ids=["chatml-with-eos", "one-registered", "no-stop-after-each-answer"],
)
def test_piped_markers_without_that_evidence_stay_errors(tmp_path: Path, template: str, registered: list[str]) -> None:
    folder = helpers.build_toy_tokenizer(tmp_path / "tok")
    if registered:
        tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        tj, _, _ = register_control_tokens(tj, registered, reuse_reserved=False)
        (folder / "tokenizer.json").write_bytes(dump_json(tj))
    result = check(context(folder, template), "control-tokens-atomic")
    assert result.status == "fail", result.message
    assert "is not one token" in result.message and "reads them as text" not in result.message


SENTINEL = GOOD.replace(
    "{%- if m.content is string -%}",
    "{%- set note = m.note if m.note is defined else '<|NONE|>' -%}"
    "{%- if note != '<|NONE|>' -%}{{- note -}}{%- endif -%}{%- if m.content is string -%}",
)


def test_a_sentinel_the_template_only_compares_with_is_no_control_token(good: Path) -> None:
    ctx = context(good, SENTINEL)
    assert "<|NONE|>" not in ctx.control_tokens
    assert check(ctx, "control-tokens-atomic").status in ("pass", "info")


def test_a_compared_sentinel_the_template_writes_is_a_control_token(good: Path) -> None:
    written = SENTINEL.replace("{{- note -}}", "{{- note + '<|NONE|>' -}}")
    written = written.replace("m.note if m.note is defined else '<|NONE|>'", "'x'")
    ctx = context(good, written)
    assert "<|NONE|>" in ctx.control_tokens
    result = check(ctx, "control-tokens-atomic")
    assert result.status == "fail" and "<|NONE|> is not one token" in result.message


def _phi3_small(tmp_path: Path, tokens: list[str]) -> Path:
    """Phi-3-small's template (it writes '<|' + role + '|>' for any role) on the toy tokenizer with `tokens`."""
    folder = helpers.build_toy_tokenizer(tmp_path / "tok", add_bos=False)
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tj, _, _ = register_control_tokens(tj, tokens, reuse_reserved=False)
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    ids = {e["content"]: e["id"] for e in tj["added_tokens"]}
    (folder / "generation_config.json").write_bytes(dump_json({"eos_token_id": [ids["<|end|>"]]}))
    return folder


def test_a_token_assembled_from_a_role_the_template_does_not_support_is_not_asserted(tmp_path: Path) -> None:
    template = (UNSEEN / "phi-3-small-8k" / "chat_template.jinja").read_text(encoding="utf-8")
    folder = _phi3_small(tmp_path / "all", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"])
    result = check(context(folder, template), "control-tokens-atomic")
    assert "<|tool|>" not in result.message and not any("<|tool|>" in f.text for f in result.findings)
    assert result.status == "pass", result.message
    missing = _phi3_small(tmp_path / "missing", ["<|system|>", "<|assistant|>", "<|end|>"])
    result = check(context(missing, template), "control-tokens-atomic")
    assert result.status == "fail" and "<|user|> is not one token" in result.message


def _generation_eos(folder: Path, tokens: list[str]) -> Path:
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    ids = {e["content"]: e["id"] for e in tj["added_tokens"]}
    (folder / "generation_config.json").write_bytes(dump_json({"eos_token_id": [ids[t] for t in tokens]}))
    return folder


def test_an_eos_outside_generation_stops_that_hold_the_turn_end_is_info(tmp_path: Path) -> None:
    folder = _generation_eos(chatml_folder(tmp_path / "tok"), ["<|im_end|>"])  # Kimi K2's way: [EOS] no stop
    result = check(context(folder), "generation-config-consistent")
    assert result.status == "info", result.message
    assert "lacks the tokenizer's eos_token </s> (id 2)" in result.message
    assert "generation stops on the template's turn end <|im_end|>" in result.message


def test_an_eos_outside_generation_stops_without_the_turn_end_fails(tmp_path: Path) -> None:
    folder = _generation_eos(chatml_folder(tmp_path / "tok"), ["<s>"])
    result = check(context(folder, stop_tokens=["<|im_end|>"]), "generation-config-consistent")
    assert result.status == "fail" and "lacks the tokenizer's eos_token </s> (id 2)" in result.message


# Seed-OSS's format: every message opens with the BOS token.
BOS_PER_MESSAGE = GOOD.replace("{{- '<|im_start|>' + m.role + '\\n' -}}", "{{- bos_token + m.role + '\\n' -}}")


def test_a_bos_opening_every_message_is_no_double_bos(tmp_path: Path) -> None:
    ctx = context(chatml_folder(tmp_path / "tok", add_bos=False), BOS_PER_MESSAGE)
    assert ctx.rendered["plain"].text.count("<s>") == 2
    assert check(ctx, "no-double-bos").status == "pass"


def test_a_bos_per_message_plus_the_post_processors_is_still_named(tmp_path: Path) -> None:
    ctx = context(chatml_folder(tmp_path / "tok", add_bos=True), BOS_PER_MESSAGE)
    result = check(ctx, "no-double-bos")
    assert result.status == "warn" and "at token positions [0, 1" in result.message


def test_records_rendered_with_a_bos_per_message_have_no_double_bos(tmp_path: Path) -> None:
    from hf_chat_templates.verification.dataset import verify_conversations

    folder = chatml_folder(tmp_path / "tok", add_bos=False)
    record = {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]}
    data = helpers.write_jsonl(tmp_path / "c.jsonl", [json.dumps(record)])
    per_message = tmp_path / "per-message.jinja"
    per_message.write_text(BOS_PER_MESSAGE)
    assert verify_conversations(folder, data, TemplateChoice(template=per_message)).failed["no-double-bos"] == 0
    twice = tmp_path / "twice.jinja"
    twice.write_text("{{ bos_token }}" + BOS_PER_MESSAGE)
    assert verify_conversations(folder, data, TemplateChoice(template=twice)).failed["no-double-bos"] == 1


# Bielik's and MiniMax-M2's way: the first system message is read, the loop renders user and assistant only.
FIRST_SYSTEM_ONLY = (
    "{%- if messages[0].role == 'system' -%}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}"
    "{%- endif -%}{%- for m in messages -%}{%- if m.role in ('user', 'assistant') -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + (m.content if m.content is string else '') + '<|im_end|>\\n' -}}"
    "{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_later_system_message_dropped_fails_nothing_dropped(good: Path) -> None:
    result = check(context(good, FIRST_SYSTEM_ONLY), "nothing-dropped")
    later = [f for f in result.findings if f.probe == "system-later"]
    assert later and later[0].severity == "error"
    assert "probe system-later: the system content of message 3 ('qz4system') is dropped" in later[0].text


def test_a_later_system_message_rendered_or_refused_drops_nothing(good: Path) -> None:
    assert not [f for f in check(context(good), "nothing-dropped").findings if f.probe == "system-later"]
    refusing = FIRST_SYSTEM_ONLY.replace(
        "{%- for m in messages -%}",
        "{%- for m in messages -%}{%- if m.role == 'system' and not loop.first -%}"
        "{{- raise_exception('System message must be at the beginning.') -}}{%- endif -%}",
    )
    ctx = context(good, refusing)
    assert ctx.rendered["system-later"].refused
    assert not [f for f in check(ctx, "nothing-dropped").findings if f.probe == "system-later"]


# DeepSeek's way: every system message is gathered at the top, so a later one rewrites what came before it.
HOISTED_SYSTEM = (
    "{%- set ns = namespace(system='') -%}{%- for m in messages if m.role == 'system' -%}"
    "{%- set ns.system = ns.system + m.content -%}{%- endfor -%}"
    "{%- if ns.system -%}{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for m in messages if m.role != 'system' -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + (m.content if m.content is string else '') + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_later_system_message_moved_to_the_top_is_read_and_its_place_not_judged(good: Path) -> None:
    ctx = context(good, HOISTED_SYSTEM)
    assert "qz4system" in (ctx.rendered["system-later"].text or "")
    for check_id in ("nothing-dropped", "prefix-stable", "assistant-mask"):
        assert not [f for f in check(ctx, check_id).findings if f.probe == "system-later"], check_id


# Kimi K2 Thinking's way: `message.get('reasoning_content', '')` is None when the key is there with None.
REASONING_GET = GOOD.replace(
    "{%- if m.content is string -%}",
    "{%- if m.role == 'assistant' -%}{{- '<think>' ~ m.get('reasoning_content', '') ~ '</think>' -}}{%- endif -%}"
    "{%- if m.content is string -%}",
)


def test_a_null_reasoning_written_as_none_fails_values_faithful(good: Path) -> None:
    result = check(context(good, REASONING_GET), "values-faithful")
    nulls = [f for f in result.findings if f.probe == "reasoning-null"]
    assert result.status == "fail" and nulls and nulls[0].severity == "error"
    assert "message 1's reasoning_content is null, and the template writes the literal None" in nulls[0].text
    assert "<think>None</think>" in nulls[0].text.replace("⟨here⟩", "")


def test_a_null_reasoning_tested_before_it_is_written_is_faithful(good: Path) -> None:
    tested = REASONING_GET.replace("m.get('reasoning_content', '')", "(m.reasoning_content or '')")
    result = check(context(good, tested), "values-faithful")
    assert not [f for f in result.findings if f.probe == "reasoning-null"]


def test_the_new_probes_are_in_the_suite() -> None:
    ids = [p.id for p in build_probes()]
    assert "system-later" in ids and "reasoning-null" in ids and len(ids) == len(set(ids))
