"""Every check fails on a crafted broken tokenizer or template, with a message naming what and where.

The baseline is a ChatML-like template on a small trained tokenizer: it passes, and each test breaks one thing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hf_chat_templates.conversations.probes import Probe
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.tokenizer.folder import dump_json
from hf_chat_templates.verification.runner import run_checks

from ..helpers import GOOD, chatml_folder, check, context


def test_baseline_passes_every_check(good: Path) -> None:
    ctx = context(good)
    results = {r.id: r for r in run_checks(ctx)}
    failing = {k: r.message for k, r in results.items() if r.status == "fail"}
    assert failing == {}
    assert results["injection"].status == "info"  # spelled control tokens become tokens unless sanitized
    # The baseline neither renders nor names reasoning: a limit of its format, info (an error with training=True)
    assert results["nothing-dropped"].status == "info"
    assert "reasoning (reasoning_content) is never rendered" in results["nothing-dropped"].message
    assert ctx.stop_tokens == ("<|im_end|>",)
    assert ctx.capabilities["parallel_calls"] == "yes" and ctx.capabilities["reasoning"] == "no"


def test_renders_fails_on_openai_tool_calls(good: Path) -> None:
    broken = GOOD.replace("{{- m.content -}}", "{{- m.content -}}").replace(
        "{%- elif m.content -%}", "{%- elif m.content is not defined -%}{{- m.content + '' -}}{%- elif m.content -%}"
    )
    result = check(context(good, broken), "renders")
    assert result.status == "fail"
    assert result.probe == "tool-call"
    assert "probe tool-call (an OpenAI-format tool call, arguments as a dict) does not render" in result.message
    assert "UndefinedError" in result.message


def test_control_tokens_atomic_fails_when_unregistered(tmp_path: Path) -> None:
    ctx = context(chatml_folder(tmp_path / "tok", register=False))
    result = check(ctx, "control-tokens-atomic")
    assert result.status == "fail"
    assert result.message.startswith("<|im_start|> is not one token: it encodes to")
    assert "written in probe plain at char 0" in result.message
    assert result.detail["token"] == "<|im_start|>" and len(result.detail["ids"]) > 1


def test_control_tokens_atomic_fails_when_not_special(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    tj = json.loads((folder / "tokenizer.json").read_text())
    for entry in tj["added_tokens"]:
        if entry["content"] == "<|im_end|>":
            entry["special"] = False
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    result = check(context(folder), "control-tokens-atomic")
    assert result.status == "fail" and "<|im_end|> is one id" in result.message
    assert "not a registered special token" in result.message


def _bos_on_tokenize(ctx: Any) -> None:
    """Make `apply_chat_template(tokenize=True)` prepend a BOS, as older tokenizer code paths did."""
    original = ctx.tokenizer.apply_chat_template

    def prepend_bos(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if kwargs.get("tokenize"):
            out["input_ids"] = [ctx.tokenizer.bos_token_id, *out["input_ids"]]
        return out

    ctx.tokenizer.apply_chat_template = prepend_bos


def test_ids_match_string_fails_when_tokenize_true_differs(good: Path) -> None:
    ctx = context(good)
    _bos_on_tokenize(ctx)
    result = check(ctx, "ids-match-string")
    assert result.status == "fail"
    assert "differs from tokenizing the rendered string at token 0" in result.message
    assert result.detail["token_position"] == 0


def test_no_double_bos_warns_when_template_and_post_processor_both_add_it(tmp_path: Path) -> None:
    # What install leaves by default: tokenizer(text) keeps its BOS, so a rendering has its calling convention.
    folder = chatml_folder(tmp_path / "tok", add_bos=True)
    ctx = context(folder, "{{- bos_token -}}" + GOOD)
    result = check(ctx, "no-double-bos")
    assert result.status == "warn" and result.severity == "warning"
    assert "tokenizer(rendered) with its defaults has 2 BOS <s> (id 1) at token positions [0, 1]" in result.message
    assert "the template writes <s> and the tokenizer's post-processor adds it again" in result.message
    hint = result.hint or ""
    assert "apply_chat_template(..., tokenize=True) or tokenizer(text, add_special_tokens=False)" in hint
    assert "--no-bos-postprocessor --output DIR" in hint


def test_no_double_bos_fails_when_the_template_writes_it_twice(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", add_bos=True)
    result = check(context(folder, "{{- bos_token + bos_token -}}" + GOOD), "no-double-bos")
    assert result.status == "fail" and result.cause == "template"
    assert "apply_chat_template(tokenize=True) has 2 BOS <s> (id 1) at token positions [0, 1]" in result.message
    assert "the template writes it more than once" in result.message
    assert "write {{ bos_token }} once" in (result.hint or "")


def test_no_double_bos_fails_when_tokenize_true_adds_one_the_template_writes(tmp_path: Path) -> None:
    ctx = context(chatml_folder(tmp_path / "tok"), "{{- bos_token -}}" + GOOD)
    _bos_on_tokenize(ctx)
    result = check(ctx, "no-double-bos")
    assert result.status == "fail" and result.cause == "tokenizer config"
    assert "apply_chat_template(tokenize=True) has 2 BOS <s> (id 1)" in result.message
    assert "apply_chat_template adds one the template writes" in result.message


def test_no_double_bos_fails_when_the_tokenizer_adds_two(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", add_bos=True)
    tj = json.loads((folder / "tokenizer.json").read_text())
    single = tj["post_processor"]["single"]
    tj["post_processor"]["single"] = [single[0], *single]
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    result = check(context(folder), "no-double-bos")
    assert result.status == "fail" and "though the rendering writes none" in result.message
    assert "post_processor" in (result.hint or "")


def test_no_double_bos_passes_with_one_bos(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", add_bos=True)
    assert check(context(folder), "no-double-bos").status == "pass"  # the post-processor's, the template none
    plain = chatml_folder(tmp_path / "plain", add_bos=False)
    assert check(context(plain, "{{- bos_token -}}" + GOOD), "no-double-bos").status == "pass"


def test_decode_roundtrip_fails_with_a_lossy_normalizer(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", normalizer={"type": "Lowercase"})
    result = check(context(folder), "decode-roundtrip")
    assert result.status == "fail"
    assert "decoding the ids changes the text at char" in result.message
    assert "(message 0)" in result.message and "⟨here⟩" in result.message


def _with_flag(folder: Path, token: str, flag: str) -> Path:
    """`folder` with `flag` (lstrip or rstrip) set on the added token `token`, in tokenizer.json and in the
    added_tokens_decoder of tokenizer_config.json (written as a copy of tokenizer.json's, as Hub folders have it)."""
    tj = json.loads((folder / "tokenizer.json").read_text())
    entry = next(e for e in tj["added_tokens"] if e["content"] == token)
    entry[flag] = True
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {
        str(e["id"]): {k: v for k, v in e.items() if k != "id"} for e in tj["added_tokens"]
    }
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    return folder


def test_decode_roundtrip_names_a_token_whose_rstrip_eats_the_newline(tmp_path: Path) -> None:
    folder = _with_flag(chatml_folder(tmp_path / "tok"), "<|im_end|>", "rstrip")
    result = check(context(folder), "decode-roundtrip")
    assert result.status == "fail" and result.cause == "tokenizer config"
    token_id = result.detail["id"]
    assert f"<|im_end|> (id {token_id}) is registered with rstrip=True, so encoding eats the whitespace after it" in (
        result.message
    )
    assert "normalizer" not in result.message + (result.hint or "")
    hint = result.hint or ""
    assert f'set "rstrip": false in tokenizer_config.json added_tokens_decoder["{token_id}"] (<|im_end|>)' in hint
    assert "registers it with lstrip and rstrip false" in hint  # a control token of the template: install fixes it


def test_decode_roundtrip_names_a_token_whose_lstrip_eats_the_newline(tmp_path: Path) -> None:
    folder = _with_flag(chatml_folder(tmp_path / "tok"), "<|im_start|>", "lstrip")
    result = check(context(folder), "decode-roundtrip")
    assert result.status == "fail" and "<|im_start|> (id " in result.message
    assert "is registered with lstrip=True, so encoding eats the whitespace before it" in result.message
    assert '"lstrip": false in tokenizer_config.json added_tokens_decoder[' in (result.hint or "")


def test_decode_roundtrip_strip_fix_names_tokenizer_json_when_the_config_has_no_decoder(tmp_path: Path) -> None:
    folder = _with_flag(chatml_folder(tmp_path / "tok"), "<|im_end|>", "rstrip")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("added_tokens_decoder", None)
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    result = check(context(folder), "decode-roundtrip")
    assert f'set "rstrip": false in the entry of <|im_end|> (id {result.detail["id"]}) in tokenizer.json' in (
        result.hint or ""
    )


def test_decode_roundtrip_still_blames_a_lossy_normalizer(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", normalizer={"type": "Lowercase"})
    result = check(context(folder), "decode-roundtrip")
    assert "registered with" not in result.message and "normalizer" in (result.hint or "")


def test_nothing_dropped_fails_when_the_second_parallel_call_is_dropped(good: Path) -> None:
    broken = GOOD.replace("{%- for c in m.tool_calls or [] -%}", "{%- for c in (m.tool_calls or [])[:1] -%}")
    result = check(context(good, broken), "nothing-dropped")
    assert result.status == "fail"
    assert result.probe == "parallel-tool-calls"
    assert "the tool-call argument value of message 1" in result.message
    assert result.detail["message_index"] == 1


def test_completion_matches_content_fails_on_a_stray_newline(good: Path) -> None:
    broken = GOOD.replace("'<|im_end|>\\n'", "'\\n<|im_end|>\\n'")
    result = check(context(good, broken), "completion-matches-content")
    assert result.status == "fail"
    assert "message 1: after the content comes '\\n' before the stop token <|im_end|>" in result.message
    assert result.detail["extra"] == "\n"


def test_completion_matches_content_fails_on_text_before_the_content(good: Path) -> None:
    broken = GOOD.replace("'<|im_start|>' + m.role + '\\n'", "'<|im_start|>' + m.role + '\\nSure: '")
    result = check(context(good, broken), "completion-matches-content")
    assert result.status == "fail" and "is not the content" in result.message


def test_prefix_stable_warns_when_earlier_turns_depend_on_later_ones(good: Path) -> None:
    broken = "{{- 'Turns: ' + (messages | length | string) + '\\n' -}}" + GOOD
    result = check(context(good, broken), "prefix-stable")
    assert result.status == "warn"
    assert "renders differently once the conversation goes past it" in result.message
    assert result.detail["token_position"] >= 0


def test_boundary_merge_fails_when_a_token_spans_two_messages(good: Path) -> None:
    probe = Probe(
        "split-word", ({"role": "user", "content": "The quick brown fo"}, {"role": "assistant", "content": "x jumps"})
    )
    ctx = context(good, "{%- for m in messages -%}{{ m.content }}{%- endfor -%}", probes=(probe,))
    result = check(ctx, "boundary-merge")
    assert result.status == "fail"
    assert "spans the boundary between message 0 and 1 at char 18" in result.message


def test_stop_token_registered_fails_when_generation_config_lacks_it(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", stop_in_generation=False)
    result = check(context(folder), "stop-token-registered")
    assert result.status == "fail"
    assert "stop token <|im_end|>" in result.message and "generation_config.json eos_token_id [2]" in result.message
    fix = f"install --template TEMPLATE.jinja --tokenizer {folder} --stop-token '<|im_end|>' --output DIR"
    assert fix in (result.hint or "") and "into generation_config.json eos_token_id" in (result.hint or "")


def test_stop_token_registered_fails_when_pad_is_the_stop_token(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["pad_token"] = "<|im_end|>"
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    result = check(context(folder), "stop-token-registered")
    assert result.status == "fail" and "pad token is the stop token <|im_end|>" in result.message
    # install keeps a pad the tokenizer has: the fix is the option that replaces it, with a token that can pad
    assert f"--tokenizer {folder} --pad-token '<unk>' --output DIR sets a pad token" in (result.hint or "")
    assert "without --pad-token, install keeps the tokenizer's pad" in (result.hint or "")


def test_deterministic_fails_on_the_clock_and_names_the_kwarg(good: Path) -> None:
    clocked = (
        "{%- if not date_string is defined -%}{%- set date_string = strftime_now('%d %b %Y') -%}{%- endif -%}"
        "{{- 'Today: ' + date_string + '\\n' -}}" + GOOD
    )
    result = check(context(good, clocked), "deterministic")
    assert result.status == "warn" and result.severity == "warning"  # one kwarg pins it: a risk, not an error
    assert "reads the clock (message 0, char" in result.message and "02·Jan·2024" in result.message
    assert "the template's date_string kwarg pins it" in result.message
    assert result.detail["pinned_by"] == "date_string"
    assert "date_string='26 Jul 2024'" in (result.hint or "")


def test_deterministic_fails_on_a_clock_no_kwarg_pins(good: Path) -> None:
    clocked = "{{- 'Now: ' + strftime_now('%H:%M:%S') + '\\n' -}}" + GOOD
    result = check(context(good, clocked), "deterministic")
    assert result.status == "fail" and "no kwarg pins it" in result.message and "time of day" in result.message
    assert result.detail["pinned_by"] is None and result.detail["time_of_day"] is True


def test_deterministic_warns_on_todays_date_no_kwarg_pins(good: Path) -> None:
    dated = "{{- 'Today: ' + strftime_now('%Y-%m-%d') + '\\n' -}}" + GOOD
    result = check(context(good, dated), "deterministic")
    assert result.status == "warn" and "no kwarg pins it" in result.message and "time of day" not in result.message
    assert result.detail["time_of_day"] is False


def test_engine_parity_fails_on_a_filter_minijinja_lacks(good: Path) -> None:
    broken = GOOD.replace("{{- m.content -}}", "{{- m.content -}}{{- ' (' ~ (m.content | wordcount) ~ ')' -}}")
    result = check(context(good, broken, engines="tgi"), "engine-parity")
    assert result.status == "fail"
    assert "minijinja cannot render it" in result.message and "wordcount" in result.message


def test_injection_is_info_and_sanitizing_prevents_it(good: Path) -> None:
    result = check(context(good), "injection")
    assert result.status == "info" and result.severity == "info"
    assert "user content spelling <|im_start|> <|im_end|> becomes 2 control token(s)" in result.message
    assert "apply_chat_template(..., sanitize_control_tokens=True) keeps them as text" in result.message
    assert result.detail["sanitize_prevents"] is True


def test_probe_suite_covers_the_issue_list() -> None:
    ids = {p.id for p in build_probes()}
    assert {
        "plain",
        "system",
        "multi-turn",
        "tool-call",
        "tool-call-json-arguments",
        "parallel-tool-calls",
        "empty-content",
        "content-parts",
        "reasoning",
        "unicode",
        "whitespace",
        "long",
        "generation-prompt",
        "continue-final",
    } <= ids


def test_renders_warns_on_a_deliberate_refusal(good: Path) -> None:
    refusing = (
        "{%- for m in messages -%}{%- for c in m.tool_calls or [] -%}{%- if c.function.arguments is string -%}"
        "{{- raise_exception('pass tool-call arguments as a dict') -}}{%- endif -%}{%- endfor -%}"
        "{%- endfor -%}" + GOOD
    )
    result = check(context(good, refusing), "renders")
    assert result.status == "info"  # a limit the template states, of a shape (its tool calls render otherwise)
    assert result.probe == "tool-call-json-arguments"
    assert "the template refuses this conversation shape (raise_exception: pass tool-call arguments as a dict)" in (
        result.message
    )


# ---- publish guard: the files of a folder must agree ----


def test_template_sources_agree_fails_when_file_and_key_differ(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    (folder / "chat_template.jinja").write_text(GOOD.replace("<|im_end|>\\n", "<|im_end|>"))
    result = check(context(folder), "template-sources-agree")
    assert result.status == "fail"
    assert "chat_template.jinja and tokenizer_config.json key 'chat_template' differ from line 1" in result.message


def test_template_sources_agree_fails_on_a_named_template(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": GOOD}, {"name": "training", "template": "A\nB"}]
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "training.jinja").write_text("A\nC")
    result = check(context(folder), "template-sources-agree")
    assert result.status == "fail"
    assert "additional_chat_templates/training.jinja and the 'training' entry" in result.message
    assert "differ from line 2" in result.message


def test_added_tokens_agree_fails_on_a_flag_mismatch(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    tj = json.loads((folder / "tokenizer.json").read_text())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {
        str(e["id"]): {k: e[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for e in tj["added_tokens"]
    }
    im_end = next(e["id"] for e in tj["added_tokens"] if e["content"] == "<|im_end|>")
    config["added_tokens_decoder"][str(im_end)]["special"] = False
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    result = check(context(folder), "added-tokens-agree")
    assert result.status == "fail"
    assert f"id {im_end}: tokenizer.json and tokenizer_config.json disagree on special: True vs False" in result.message


def test_generation_config_consistent_fails_on_eos_and_range(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    (folder / "generation_config.json").write_bytes(dump_json({"eos_token_id": [999999], "bos_token_id": 1}))
    result = check(context(folder), "generation-config-consistent")
    assert result.status == "fail"
    assert "eos_token_id [999999] lacks the tokenizer's eos_token" in result.message
    assert any("999999 is outside the vocabulary" in e["message"] for e in result.detail["examples"])
    outside = next(f for f in result.findings if "outside the vocabulary" in f.text)
    assert outside.hint == "correct or remove 999999 in generation_config.json eos_token_id: install leaves it as it is"


def test_generation_config_pad_that_differs_names_pad_token(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_bytes(dump_json({**config, "pad_token": "<unk>"}))
    (folder / "generation_config.json").write_bytes(dump_json({"eos_token_id": [2, 401], "pad_token_id": 1}))
    result = check(context(folder), "generation-config-consistent")
    assert result.status == "fail" and "generation_config.json pad_token_id is 1 but the tokenizer's is 0 (<unk>)" in (
        result.message
    )
    assert f"--tokenizer {folder} --pad-token '<unk>' --output DIR writes it as pad_token_id" in (result.hint or "")


def test_a_gguf_fix_is_an_install_into_a_new_gguf(good: Path) -> None:
    ctx = context(good, gguf=Path("model.gguf"))  # the folder's own template: the GGUF's, installed again
    assert ctx.install_command() == "hf-chat-templates install --gguf model.gguf --output FIXED.gguf"
    # options install --gguf refuses are left out; the others kept
    assert ctx.install_command("--training") == "hf-chat-templates install --gguf model.gguf --output FIXED.gguf"
    assert ctx.install_command("--format both") == "hf-chat-templates install --gguf model.gguf --output FIXED.gguf"
    assert ctx.install_command("--stop-token '<|im_end|>'") == (
        "hf-chat-templates install --gguf model.gguf --stop-token '<|im_end|>' --output FIXED.gguf"
    )
    other = context(good, GOOD + " ", gguf=Path("model.gguf"))  # a template file given to verify
    assert other.install_command().startswith("hf-chat-templates install --template TEMPLATE.jinja --gguf model.gguf")
    assert ctx.generation_key("eos_token_id").startswith("the GGUF's stop ids (tokenizer.ggml.eos_token_id")
    assert context(good).generation_key("eos_token_id") == "generation_config.json eos_token_id"
