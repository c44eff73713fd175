"""Strings in control-token shapes that are no control token of the model: a marker the template builds from a role
its format does not have (ChatGLM3's `<|tool|>`), and a plain-text marker the template writes as a literal that no
tokenizer file names (Granite's `<|function_call_library|>`). Each is info (or a warning), never a forgotten token;
the template's turn markers and the roles every format has still fail when left in pieces."""

from __future__ import annotations

import json
from pathlib import Path

from hf_chat_templates.tokenizer.folder import dump_json
from hf_chat_templates.tokenizer.vocab import register_control_tokens

from .. import helpers
from ..helpers import GOOD, chatml_folder, check, context

# ChatGLM3's way: any role written as '<|' + role + '|>', no tool format; generation stops on the next role token.
GLM_LIKE = (
    "{%- for m in messages -%}{{- '<|' + m.role + '|>\\n ' -}}{{- m.content -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}"
)


def _glm_folder(root: Path, tokens: list[str]) -> Path:
    folder = helpers.build_toy_tokenizer(root, add_bos=False)
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tj, _, _ = register_control_tokens(tj, tokens, reuse_reserved=False)
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    ids = {e["content"]: e["id"] for e in tj["added_tokens"]}
    stops = [ids[t] for t in ("<|user|>", "<|observation|>") if t in ids] or [2]
    (folder / "generation_config.json").write_bytes(dump_json({"eos_token_id": stops}))
    return folder


GLM_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]


def test_a_marker_built_from_a_role_the_format_does_not_have_is_info(tmp_path: Path) -> None:
    ctx = context(_glm_folder(tmp_path / "tok", GLM_TOKENS), GLM_LIKE)
    assert "<|tool|>" not in ctx.control_tokens and "<|user|>" in ctx.control_tokens
    assert ctx.role_markers == {"<|tool|>": "tool"}
    result = check(ctx, "control-tokens-atomic")
    assert result.status == "info", result.message
    (finding,) = result.findings
    assert finding.severity == "info" and finding.probe is not None
    assert finding.text.startswith(
        "the template writes the role 'tool' as <|tool|>, which the model has no token for (it has "
    )
    assert "a role its format does not have (written in probe " in finding.text and "<|user|>" in finding.text
    assert "--control-token <|tool|>" in (finding.hint or "")
    merge = check(ctx, "boundary-merge")
    assert not any(f.severity == "error" and "<|tool|>" in f.text for f in merge.findings), merge.message


def test_a_tool_marker_the_template_tests_for_is_the_formats_and_fails(tmp_path: Path) -> None:
    # the template handles the role: 'tool' is a role of its format, so its marker in pieces is a forgotten token
    template = GLM_LIKE.replace(
        "{{- m.content -}}", "{%- if m.role == 'tool' -%}{{- 'Result: ' -}}{%- endif -%}{{- m.content -}}"
    )
    ctx = context(_glm_folder(tmp_path / "tok", GLM_TOKENS), template)
    assert "<|tool|>" in ctx.control_tokens and not ctx.role_markers
    result = check(ctx, "control-tokens-atomic")
    assert result.status == "fail" and result.message.startswith("<|tool|> is not one token"), result.message


def test_a_core_role_marker_left_unregistered_still_fails(tmp_path: Path) -> None:
    ctx = context(_glm_folder(tmp_path / "tok", ["<|system|>", "<|assistant|>", "<|observation|>"]), GLM_LIKE)
    assert "<|user|>" not in ctx.role_markers
    result = check(ctx, "control-tokens-atomic")
    assert result.status == "fail", result.message
    named = result.message + json.dumps(result.detail, ensure_ascii=False)
    assert "<|user|> is not one token" in named


def test_with_no_role_token_registered_the_tool_marker_is_no_exception(tmp_path: Path) -> None:
    # nothing says the model has tokens of this construction: every marker in pieces is a forgotten token
    ctx = context(_glm_folder(tmp_path / "tok", []), GLM_LIKE)
    assert not ctx.role_markers
    assert check(ctx, "control-tokens-atomic").status == "fail"


# Granite's vLLM tool template: a fixed prompt with a plain-text marker before the tools, ChatML turns registered.
LIBRARY = "{{- 'SYSTEM: Call a function when it helps.\\n<|function_call_library|>\\n' -}}" + GOOD


def test_a_literal_marker_no_tokenizer_file_names_is_text_by_design(tmp_path: Path) -> None:
    result = check(context(chatml_folder(tmp_path / "tok"), LIBRARY), "control-tokens-atomic")
    assert result.status == "info", result.message
    assert result.message.startswith("<|function_call_library|> is not one token")
    assert "a marker the template writes as a literal (the same in every rendering) that no tokenizer file of the " in (
        result.message
    )
    assert "no turn marker: text by design" in result.message
    assert "declare it with --control-token <|function_call_library|>" in result.message


def test_a_literal_marker_written_only_with_tools_is_a_warning(tmp_path: Path) -> None:
    template = "{%- if tools -%}{{- 'Functions:\\n<|function_call_library|>\\n' -}}{%- endif -%}" + GOOD
    result = check(context(chatml_folder(tmp_path / "tok"), template), "control-tokens-atomic")
    assert result.status == "warn", result.message
    assert "a marker the template writes as a literal (in some renderings)" in result.message


def test_an_unregistered_turn_marker_still_fails(tmp_path: Path) -> None:
    # written once more for every exchange: the template's turn structure, a control token left unregistered
    per_turn = GOOD.replace(
        "{{- '<|im_start|>' + m.role + '\\n' -}}", "{{- '<|im_start|>' + m.role + '\\n<|turn|>' -}}"
    )
    result = check(context(chatml_folder(tmp_path / "a"), per_turn), "control-tokens-atomic")
    assert result.status == "fail" and "<|turn|> is not one token" in result.message, result.message
    assert "text by design" not in result.message
    # leading every rendering: the template's own opening, a control token too
    leading = "{{- '<|begin_of_chat|>' -}}" + GOOD
    result = check(context(chatml_folder(tmp_path / "b"), leading), "control-tokens-atomic")
    assert result.status == "fail" and "<|begin_of_chat|> is not one token" in result.message, result.message


def test_a_literal_marker_the_tokenizer_config_names_still_fails(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["function_library_marker"] = "<|function_call_library|>"
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    result = check(context(folder, LIBRARY), "control-tokens-atomic")
    assert result.status == "fail" and "text by design" not in result.message, result.message
