"""Token inference that does not depend on how tokens look: structural fragments of any shape, the folder's
generation stops, several stops, a turn with no end token, and a note wherever inference had to choose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from hf_chat_templates.families.tokens import template_tokens
from hf_chat_templates.tokenizer.folder import dump_json
from hf_chat_templates.tokenizer.vocab import register_control_tokens
from hf_chat_templates.verification.context import VerifyContext
from hf_chat_templates.verification.runner import run_checks

from ..helpers import build_toy_tokenizer, run


def turns(open_: str, close: str, *, prefix: str = "", roles: dict[str, str] | None = None) -> str:
    """A template writing `prefix`, then each message as ROLE-MARKER content CLOSE (role markers from `roles`)."""
    roles = roles or {"user": "<｜User｜>", "assistant": "<｜Assistant｜>", "system": "<｜System｜>"}
    branches = "".join(
        f"{{%- {'if' if i == 0 else 'elif'} m.role == '{role}' -%}}{{{{- '{marker}' -}}}}"
        for i, (role, marker) in enumerate(roles.items())
    )
    return (
        f"{{{{- '{prefix}' -}}}}{{%- for m in messages -%}}{branches}{{%- endif -%}}"
        f"{{{{- '{open_}' + m.content + '{close}' -}}}}{{%- endfor -%}}"
        f"{{%- if add_generation_prompt -%}}{{{{- '{roles['assistant']}' -}}}}{{%- endif -%}}"
    )


def folder_with(tmp_path: Path, template: str, *, register: list[str] = (), eos: list[str] | None = None) -> Path:
    """The toy tokenizer with `template`, `register` added as special tokens, and generation_config eos `eos`."""
    folder = build_toy_tokenizer(tmp_path / "tok", add_bos=False)
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if register:
        tj, _, _ = register_control_tokens(tj, list(register), reuse_reserved=False)
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    if eos is not None:
        ids = {e["content"]: e["id"] for e in tj["added_tokens"]}
        (folder / "generation_config.json").write_bytes(dump_json({"eos_token_id": [ids[t] for t in eos]}))
    return folder


def tokens_of(folder: Path) -> VerifyContext:
    from hf_chat_templates.tokenizer.folder import read_folder

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return VerifyContext(tokenizer, tokenizer.chat_template, folder=read_folder(folder))


@pytest.mark.parametrize(
    ("roles", "close", "prefix", "expected"),
    [
        (  # DeepSeek
            {"user": "<｜User｜>", "assistant": "<｜Assistant｜>"},
            "<｜end▁of▁sentence｜>",
            "",
            {"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"},
        ),
        (  # Nemotron
            {"user": "<SPECIAL_11>User\n", "assistant": "<SPECIAL_11>Assistant\n"},
            "<SPECIAL_12>",
            "",
            {"<SPECIAL_11>", "<SPECIAL_12>"},
        ),
        (  # Gemma 4
            {"user": "<|turn>user\n", "assistant": "<|turn>model\n"},
            "<turn|>",
            "",
            {"<|turn>", "<turn|>"},
        ),
        (  # GLM's prefix, written once
            {"user": "<|user|>\n", "assistant": "<|assistant|>\n"},
            "<eot>",
            "[gMASK]<sop>",
            {"[gMASK]", "<sop>", "<eot>"},
        ),
    ],
)
def test_unregistered_tokens_of_any_shape_fail_control_tokens_atomic(
    tmp_path: Path, roles: dict[str, str], close: str, prefix: str, expected: set[str]
) -> None:
    ctx = tokens_of(folder_with(tmp_path, turns("", close, prefix=prefix, roles=roles)))
    assert expected <= set(ctx.control_tokens)
    assert ctx.stop_tokens == (close,)
    result = next(r for r in run_checks(ctx, only=["control-tokens-atomic"]) if r.id == "control-tokens-atomic")
    named = result.message + json.dumps(result.detail, ensure_ascii=False)
    assert result.status == "fail" and all(t in named for t in expected), named


def test_registered_they_pass_and_text_tags_are_not_tokens(tmp_path: Path) -> None:
    """Registered, the same tokens are atomic; a tools block's `<tools>` tags, written once, are not inferred."""
    template = "{%- if tools -%}{{- '<tools>' + tools | tojson + '</tools>' -}}{%- endif -%}" + turns(
        "", "<｜end▁of▁sentence｜>"
    )
    tokens = ["<｜User｜>", "<｜Assistant｜>", "<｜System｜>", "<｜end▁of▁sentence｜>"]
    ctx = tokens_of(folder_with(tmp_path, template, register=tokens))
    assert "<tools>" not in ctx.control_tokens and "</tools>" not in ctx.control_tokens
    result = next(r for r in run_checks(ctx, only=["control-tokens-atomic"]) if r.id == "control-tokens-atomic")
    assert result.status == "pass", result.message


def test_the_folders_generation_stop_is_chosen_among_several(tmp_path: Path) -> None:
    """Cohere writes <|END_RESPONSE|><|END_OF_TURN_TOKEN|> after each answer: the folder says which one stops."""
    ends = "<|END_RESPONSE|><|END_OF_TURN_TOKEN|>"
    roles = {"user": "<|USER_TOKEN|>", "assistant": "<|CHATBOT_TOKEN|>"}
    template = turns("", ends, roles=roles)
    registered = [*roles.values(), "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>"]
    ctx = tokens_of(folder_with(tmp_path / "a", template, register=registered, eos=["<|END_OF_TURN_TOKEN|>"]))
    assert ctx.stop_tokens == ("<|END_OF_TURN_TOKEN|>",)
    assert ctx.tokens.origin.startswith("the folder's generation_config.json") and not ctx.tokens.notes
    # Without the folder's word, the first is taken and the choice is said, never silently.
    bare = tokens_of(folder_with(tmp_path / "b", template, register=registered))
    assert bare.stop_tokens == ("<|END_RESPONSE|>",)
    assert "took <|END_RESPONSE|>" in bare.tokens.notes[0] and "--stop-token" in bare.tokens.notes[0]


HARMONY_LIKE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m.tool_calls -%}"
    "{{- '<|start|>assistant to=' + m.tool_calls[0].function.name + '<|message|>' "
    "+ m.tool_calls[0].function.arguments | tojson + '<|call|>' -}}"
    "{%- elif m.role == 'tool' -%}{{- '<|start|>tool<|message|>' + m.content + '<|end|>' -}}"
    "{%- else -%}{{- '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' -}}{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"
)


def test_a_tool_call_turn_with_its_own_end_gives_a_second_stop(tmp_path: Path) -> None:
    registered = ["<|start|>", "<|message|>", "<|end|>", "<|call|>"]
    ctx = tokens_of(folder_with(tmp_path, HARMONY_LIKE, register=registered))
    assert ctx.stop_tokens == ("<|end|>", "<|call|>")
    assert any("a tool-call turn ends with <|call|>" in n for n in ctx.tokens.notes)


def tool_results_in_the_model_turn(open_: str, close: str, *, per_argument: bool) -> str:
    """A tool call's strings between `open_` and `close` (each argument, or all of them at once), and its result
    written inside the model's turn, as Gemma 4 writes a message's `tool_responses`: no turn end after the call."""
    value = f"'{open_}' + v + '{close}'"
    args = (
        "{%- for k, v in c.function.arguments | dictsort -%}{{- (',' if not loop.first else '') + k + ':' + "
        + (value if per_argument else "v")
        + " -}}{%- endfor -%}"
    )
    return (
        "{%- for m in messages -%}"
        "{%- if m.role == 'tool' -%}{{- '<|tool_response>' + m.content + '<tool_response|>' -}}"
        "{%- else -%}"
        "{%- if not (loop.previtem and loop.previtem.role == 'tool') -%}"
        "{{- '<|turn>' + ('model' if m.role == 'assistant' else m.role) + '\\n' -}}{%- endif -%}"
        "{%- for c in m.tool_calls or [] -%}{{- '<|tool_call>call:' + c.function.name + '{' -}}"
        + ("" if per_argument else f"{{{{- '{open_}' -}}}}")
        + args
        + ("" if per_argument else f"{{{{- '{close}' -}}}}")
        + "{{- '}<tool_call|>' -}}{%- endfor -%}"
        "{{- m.content or '' -}}{%- if not m.tool_calls -%}{{- '<turn|>\\n' -}}{%- endif -%}"
        "{%- endif -%}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
    )


@pytest.mark.parametrize(
    ("open_", "close", "per_argument"),
    [
        ('<|"|>', '<|"|>', True),  # Gemma 4: each string quoted by one token, written before and after it
        ("<|str>", "<str|>", True),  # a closing token written once more for each argument string
        ("<|args|>", "<|args|>", False),  # the arguments between one token, once per call
    ],
)
def test_a_token_written_inside_a_tool_call_is_never_its_stop(
    open_: str, close: str, per_argument: bool, tmp_path: Path
) -> None:
    """The token after the call ends a tool-call turn; one the model writes mid-call would stop generation there."""
    template = tool_results_in_the_model_turn(open_, close, per_argument=per_argument)
    registered = ["<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>"]
    registered += list(dict.fromkeys([open_, close]))
    ctx = tokens_of(folder_with(tmp_path / "a", template, register=registered, eos=["<turn|>"]))
    assert ctx.stop_tokens == ("<turn|>", "<tool_call|>")
    # The folder's stop after a call (Gemma 4 stops on <|tool_response>) wins, as for an answer's.
    listed = folder_with(tmp_path / "b", template, register=registered, eos=["<turn|>", "<|tool_response>"])
    assert tokens_of(listed).stop_tokens == ("<turn|>", "<|tool_response>")


GLM_LIKE = (
    "[gMASK]<sop>{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|user|>\n{{ m.content }}"
    "{%- elif m.role == 'assistant' -%}<|assistant|>\n{{ m.content }}"
    "{%- elif m.role == 'tool' -%}<|observation|>\n{{ m.content }}{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def test_a_turn_that_ends_with_no_token_is_reported_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GLM ends a turn with the next role token, which its generation_config lists: stops are known, but the model
    is never trained to stop after its last turn, and the checks say exactly that."""
    registered = ["[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|observation|>"]
    folder = folder_with(tmp_path, GLM_LIKE, register=registered, eos=["<|user|>", "<|observation|>"])
    ctx = tokens_of(folder)
    assert ctx.stop_tokens == ("<|user|>", "<|observation|>") and not ctx.tokens.turn_end
    assert "never trained to stop after its last turn" in ctx.tokens.notes[-1]
    code, out, _ = run(capsys, "verify", str(folder), "--only", "completion-matches-content")
    assert code == 1
    assert "completion-matches-content" in out and "never trained to stop after its last turn" in out
    assert "stop tokens: <|user|> <|observation|> (the folder's generation_config.json eos_token_id" in out
    assert "unknown" not in out and "no stop token is known" not in out


def test_inference_is_the_same_for_install_verify_and_prepare(tmp_path: Path) -> None:
    """One function serves every command: the same folder gives the same tokens whichever asks."""
    ends = "<|END_RESPONSE|><|END_OF_TURN_TOKEN|>"
    roles = {"user": "<|USER_TOKEN|>", "assistant": "<|CHATBOT_TOKEN|>"}
    registered = [*roles.values(), "<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>"]
    folder = folder_with(tmp_path, turns("", ends, roles=roles), register=registered, eos=["<|END_OF_TURN_TOKEN|>"])
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    generation = json.loads((folder / "generation_config.json").read_text())
    direct = template_tokens(tokenizer, tokenizer.chat_template, generation_config=generation)
    assert direct.stop_tokens == tokens_of(folder).stop_tokens == ("<|END_OF_TURN_TOKEN|>",)


def test_prepare_says_what_inference_could_not_decide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """prepare trains on the GLM-like template with the folder's stops, and its report carries the note."""
    registered = ["[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|observation|>"]
    folder = folder_with(tmp_path, GLM_LIKE, register=registered, eos=["<|user|>", "<|observation|>"])
    line = json.dumps({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]})
    data = tmp_path / "c.jsonl"
    data.write_text(line + "\n", encoding="utf-8")
    code, out, err = run(capsys, "prepare", str(folder), "--conversations", str(data), "--output", str(tmp_path / "d"))
    assert code == 0, err
    assert "note: no token ends an assistant turn: the model is never trained to stop after its last turn" in out


GEMMA4_LIKE = (
    "{%- for m in messages -%}{{- '<|turn>' + ('model' if m.role == 'assistant' else m.role) + '\\n' -}}"
    "{%- for c in m.tool_calls or [] -%}{{- '<|tool_call>' + c.function.name + '<tool_call|>' -}}{%- endfor -%}"
    "{%- if m.role == 'tool' -%}{{- '<|tool_response>' + m.content + '<tool_response|>' -}}"
    "{%- else -%}{{- m.content or '' -}}{%- endif -%}{{- '<turn|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
)


def test_tool_call_markup_is_installed_as_plain_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tags written once per tool call (whatever their shape) are markup: install adds them as plain tokens, one
    id each and kept by decoding; left in pieces, verify warns rather than fails."""
    folder = folder_with(tmp_path, GEMMA4_LIKE, register=["<|turn>", "<turn|>"], eos=["<turn|>"])
    ctx = tokens_of(folder)
    markup = {"<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>"}
    assert markup <= set(ctx.markup_tokens) and not markup & set(ctx.control_tokens)
    result = next(r for r in run_checks(ctx, only=["control-tokens-atomic"]) if r.id == "control-tokens-atomic")
    assert result.status == "warn" and "<|tool_call> is not one token" in result.message
    template = tmp_path / "gemma4.jinja"
    template.write_text(GEMMA4_LIKE, encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = run(capsys, "install", "--tokenizer", str(folder), "--template", str(template), "--output", str(out))
    assert code == 0, err
    tok = AutoTokenizer.from_pretrained(str(out))
    for token in markup:
        assert len(tok.encode(token, add_special_tokens=False)) == 1 and token not in tok.all_special_tokens
    after = next(r for r in run_checks(tokens_of(out), only=["control-tokens-atomic"]))
    assert after.status == "pass", after.message


def test_a_registered_plain_token_the_turns_write_is_not_a_false_alarm(tmp_path: Path) -> None:
    """GLM writes <think></think> in every turn and ships them as plain added tokens: one id each, so they pass;
    a stop token shipped plain still fails (skip_special_tokens keeps it)."""
    template = turns("<think></think>", "<｜end▁of▁sentence｜>")
    tokens = ["<｜User｜>", "<｜Assistant｜>", "<｜System｜>", "<｜end▁of▁sentence｜>"]
    folder = folder_with(tmp_path, template, register=[*tokens, "<think>", "</think>"])
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    for entry in tj["added_tokens"]:
        if entry["content"] in ("<think>", "</think>"):
            entry["special"] = False
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    ctx = tokens_of(folder)
    assert "<think>" in ctx.control_tokens
    result = next(r for r in run_checks(ctx, only=["control-tokens-atomic"]))
    assert result.status == "pass", result.message
    for entry in tj["added_tokens"]:
        if entry["content"] == "<｜end▁of▁sentence｜>":
            entry["special"] = False
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    result = next(r for r in run_checks(tokens_of(folder), only=["control-tokens-atomic"]))
    assert result.status == "fail" and "<｜end▁of▁sentence｜> is one id" in result.message


LLAMA_LIKE = (
    "{%- for m in messages -%}{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content -}}"
    "{%- if m.role == 'assistant' and builtin_tools is defined -%}{{- '<|eom_id|>' -}}"
    "{%- else -%}{{- '<|eot_id|>' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)


def test_a_folder_stop_written_in_a_branch_no_probe_reaches_is_a_stop(tmp_path: Path) -> None:
    """Llama's <|eom_id|> ends a turn only after a built-in tool call; generation_config lists it, so it is a stop."""
    registered = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"]
    ctx = tokens_of(folder_with(tmp_path, LLAMA_LIKE, register=registered, eos=["<|eot_id|>", "<|eom_id|>"]))
    assert ctx.stop_tokens == ("<|eot_id|>", "<|eom_id|>")
    assert any("<|eom_id|>: written by the template" in n for n in ctx.tokens.notes)
