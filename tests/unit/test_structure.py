"""`structure`: nothing before BOS, BOS where the tokenizer starts text with it, every turn the template opens
closed, the last answer closed with a stop token, no placeholder written as text. Each rule fails on a broken
template, and the baseline, the corpus of published templates and real templates (tests/data/structure) stay
silent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hf_chat_templates.conversations.probes import Probe
from hf_chat_templates.verification.checks.structure import Pair, infer_pairs, spans
from hf_chat_templates.verification.runner import run_checks

from ..helpers import GOOD, build_toy_tokenizer, check, context, corpus_manifest, corpus_names, model_folder

REAL = Path(__file__).resolve().parent.parent / "data" / "structure"

# GOOD, its system turn never closed when tools are given (llm-foundry's ChatML system block lacked its <|im_end|>)
SYSTEM_OPEN_WITH_TOOLS = GOOD.replace(
    "{{- '<|im_end|>\\n' -}}",
    "{%- if not (tools and m.role == 'system') -%}{{- '<|im_end|>\\n' -}}{%- else -%}{{- '\\n' -}}{%- endif -%}",
)
LLAMA_LIKE = (
    "{{- bos_token -}}{%- for m in messages -%}"
    "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + (m.content if m.content is string else '') -}}"
    "{%- if not (tools and m.role == 'system') -%}{{- '<|eot_id|>' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)
LLAMA_TOKENS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def test_the_baseline_passes_with_its_pairs(good: Path) -> None:
    result = check(context(good), "structure")
    assert result.status == "pass", result.message
    assert ["<|im_start|>", "<|im_end|>"] in result.detail["pairs"]


def test_a_system_turn_never_closed_when_tools_are_given_fails(good: Path) -> None:
    result = check(context(good, SYSTEM_OPEN_WITH_TOOLS), "structure")
    assert result.status == "fail" and result.severity == "error" and result.cause == "template"
    assert "the turn opened with <|im_start|> at char " in result.message
    assert "(in message 0's part of the rendering, a system message)" in result.message
    assert "is never closed with <|im_end|> before the next <|im_start|>" in result.message
    assert result.probe is not None and result.probe in result.message
    assert "write <|im_end|> at the end of that turn" in (result.hint or "")


def test_a_header_without_its_turn_end_fails(tmp_path: Path) -> None:
    folder = _folder(tmp_path, LLAMA_TOKENS)
    assert (
        check(context(folder, LLAMA_LIKE.replace("(tools and m.role == 'system')", "false")), "structure").status
        == "pass"
    )
    result = check(context(folder, LLAMA_LIKE), "structure")
    assert result.status == "fail"
    assert "opened with <|start_header_id|>" in result.message and "never closed with <|eot_id|>" in result.message


def test_text_before_bos_fails(good: Path) -> None:
    template = "\n{{ bos_token }}" + GOOD
    assert check(context(good, "{{ bos_token }}" + GOOD), "structure").status == "pass"
    result = check(context(good, template), "structure")
    assert result.status == "fail"
    assert "the template writes '\\\\n' before BOS <s> at char 1" in result.message
    assert result.hint is not None and "write {{ bos_token }} first" in result.hint


def test_the_last_answer_without_the_stop_fails_and_the_stop_is_the_earlier_answers_end(tmp_path: Path) -> None:
    """Earlier answers end with <|im_end|>, the last with `{{ eos_token }}`, here a tools suffix: the stop is
    <|im_end|>, and the last turn is reported."""
    template = GOOD.replace(
        "{{- '<|im_end|>\\n' -}}",
        "{%- if loop.last and m.role == 'assistant' -%}{{- eos_token -}}"
        "{%- else -%}{{- '<|im_end|>\\n' -}}{%- endif -%}",
    )
    folder = _folder(tmp_path, ["<|im_start|>", "<|im_end|>", "<|/tools|>"], eos="<|/tools|>")
    ctx = context(folder, template)
    assert ctx.stop_tokens[0] == "<|im_end|>" and ctx.tokens.turn_end
    assert any("earlier answers end with <|im_end|>, the last one with <|/tools|>" in n for n in ctx.tokens.notes)
    result = check(ctx, "structure")
    assert result.status == "fail"
    assert "the last assistant turn (message 1) is not closed with a stop token (<|im_end|>)" in result.message


def test_a_placeholder_written_as_text_is_a_warning_reported_once(good: Path) -> None:
    template = GOOD.replace(
        "{{- '<|im_start|>' + m.role + '\\n' -}}",
        "{{- '<|im_start|>' + m.role + '\\n' -}}{%- if m.role == 'system' -%}You are {system_message}. {%- endif -%}",
    )
    ctx = context(good, template)
    result = check(ctx, "structure")
    assert result.status == "warn" and result.severity == "warning"
    assert "the template writes the placeholder {system_message} as text" in result.message
    assert "(in message 0's part of the rendering, a system message)" in result.message
    # the prose scan no longer reports it as info: one finding, at warning
    assert "{system_message}" not in check(ctx, "template-safety").message


@pytest.mark.parametrize("written", ["$SYSTEM", "{{ tools }}", "{content}"])
def test_each_placeholder_shape_is_found(good: Path, written: str) -> None:
    template = "{{- '" + written + "\\n' -}}" + GOOD
    result = check(context(good, template), "structure")
    assert result.status == "warn" and f"placeholder {written} as text" in result.message


# functionary's call formats: several fields laid out by markup alone, on one line or on lines of their own
SYNTAXES = [
    (
        "If you call a function, reply in the following format:\\n<{start_tag}={function_name}>{parameters}{end_tag}\\n"
        "where start_tag => `<function`\\n",
        "{start_tag}",
        "<{start_tag}={function_name}>{parameters}{end_tag}",
    ),
    (
        "Respond in this format:\\n>>>${recipient}\\n${content}\\nAvailable functions:\\n",
        "{recipient}",
        ">>>${recipient}\\n${content}",
    ),
]


@pytest.mark.parametrize(("prompt", "first", "syntax"), SYNTAXES, ids=["one-line", "two-lines"])
def test_fields_laid_out_by_markup_describe_a_syntax_info(good: Path, prompt: str, first: str, syntax: str) -> None:
    result = check(context(good, "{{- '" + prompt + "' -}}" + GOOD), "structure")
    assert result.status == "info" and result.cause == "template", result.message
    assert f"the template writes the placeholder {first} as text" in result.message
    assert f"it is one of the fields of `{syntax}`, laid out by markup alone: a format description" in result.message
    assert all(f.severity == "info" for f in result.findings)


# A field in a sentence, alone on its line, beside another with no markup between, or Jinja nested in a literal:
# each a value left unfilled
STRAYS = [
    ("Reply as {persona} to {user}.\\n", "{persona}"),
    ("Call <{name}> with {arguments} as JSON.\\n", "{name}"),
    ("{system}\\n{prompt}\\n", "{system}"),
    ("<|system|>\\n{system_message}\\n<|user|>\\n{prompt}\\n", "{system_message}"),
    ("{{ bos_token }}{{ system_message }}\\n", "{{ bos_token }}"),
    ("You are {system_message}.\\n>>>${recipient}\\n", "{system_message}"),
]


@pytest.mark.parametrize(("prompt", "first"), STRAYS)
def test_a_stray_placeholder_stays_a_warning(good: Path, prompt: str, first: str) -> None:
    result = check(context(good, "{{- '" + prompt + "' -}}" + GOOD), "structure")
    assert result.status == "warn", result.message
    assert f"the template writes the placeholder {first} as text" in result.message


def test_json_and_content_are_not_placeholders(good: Path) -> None:
    """A tool schema, JSON instructions and content that spells braces are never placeholders."""
    template = "{{- 'Reply {\"name\": <function-name>} or pay $5 to $HOST_x\\n' -}}" + GOOD
    probe = Probe(
        "braces",
        ({"role": "user", "content": "Fill {system_message} and $SYSTEM"}, {"role": "assistant", "content": "ok"}),
    )
    assert check(context(good, template), "structure").status == "pass"
    assert check(context(good, GOOD, probes=(probe,)), "structure").status == "pass"


def test_turns_with_no_tokens_are_not_decided(toy_tokenizer: Path) -> None:
    template = "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    result = check(context(toy_tokenizer, template), "structure")
    assert result.status == "info"
    assert "turns not decided (no pair of tokens opens and closes each turn" in result.message


def test_pairs_are_read_from_renderings() -> None:
    """DeepSeek's user turn is closed by the assistant's opener; two contents between a pair is no turn."""
    plain = "<s><｜User｜>Question qzs1u?<｜Assistant｜>Answer qzs2a.<｜end▁of▁sentence｜><｜User｜>Question qzs3u?"
    plain += "<｜Assistant｜>Answer qzs4a.<｜end▁of▁sentence｜>"
    tokens = ["<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"]
    pairs = infer_pairs([plain], tokens, ["<｜end▁of▁sentence｜>"])
    assert set(pairs) == {Pair("<｜User｜>", "<｜Assistant｜>"), Pair("<｜Assistant｜>", "<｜end▁of▁sentence｜>")}
    occurrences = [(0, "A"), (5, "A"), (9, "C")]
    assert spans(occurrences, "A", {"C"}) == [(0, None), (5, 9)]


@pytest.mark.parametrize("name", ["deepseek-v3.1", "kimi-k2", "phi-4-mini-llama-cpp"])
def test_real_templates_are_not_false_alarms(tmp_path: Path, name: str) -> None:
    """On a tokenizer that, like these models', starts plain text without a BOS the templates never write."""
    template = (REAL / f"{name}.jinja").read_text(encoding="utf-8")
    result = check(context(build_toy_tokenizer(tmp_path / "tok", add_bos=False), template), "structure")
    assert result.status == "pass", result.message


def test_a_template_that_never_writes_the_bos_its_tokenizer_starts_text_with_warns(
    tmp_path: Path, toy_tokenizer: Path
) -> None:
    """Gemma 2's template as vLLM's examples ship it: no {{ bos_token }}, while Gemma's tokenizer adds <bos> to plain
    text: apply_chat_template(tokenize=True) ids start without it."""
    result = check(context(toy_tokenizer, GOOD), "structure")
    assert result.status == "warn" and result.severity == "warning"
    assert "the template never writes BOS <s>, though the tokenizer starts plain text with it" in result.message
    assert result.hint is not None and "write {{ bos_token }} at the template's start" in result.hint
    assert check(context(toy_tokenizer, "{{ bos_token }}" + GOOD), "structure").status == "pass"
    no_bos = build_toy_tokenizer(tmp_path / "plain", add_bos=False)
    assert check(context(no_bos, GOOD), "structure").status == "pass"


def test_the_corpus_stays_silent_but_for_what_model_toml_lists(tmp_path: Path) -> None:
    base = build_toy_tokenizer(tmp_path / "base")
    for name in corpus_names():
        folder = model_folder(name, base, tmp_path / name)
        kwargs = corpus_manifest(name).get("kwargs") or None
        (result,) = run_checks(
            context(folder, (folder / "chat_template.jinja").read_text(), kwargs=kwargs), ["structure"]
        )
        known = "structure" in corpus_manifest(name).get("known_failures", {})
        assert (result.status == "fail") == known, f"{name}: {result.message}"
        assert result.status in ("pass", "fail"), f"{name}: {result.message}"
        shutil.rmtree(folder)


def _folder(tmp_path: Path, register: list[str], eos: str | None = None) -> Path:
    import json

    from hf_chat_templates.tokenizer.folder import dump_json
    from hf_chat_templates.tokenizer.vocab import register_control_tokens

    folder = build_toy_tokenizer(tmp_path / "tok")
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tj, _, _ = register_control_tokens(tj, register, reuse_reserved=False)
    (folder / "tokenizer.json").write_bytes(dump_json(tj))
    ids = {e["content"]: e["id"] for e in tj["added_tokens"]}
    stops = [ids[t] for t in register if t.endswith(("end|>", "eot_id|>"))]
    if eos is not None:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["eos_token"] = eos
        (folder / "tokenizer_config.json").write_bytes(dump_json(config))
        stops.append(ids[eos])
    (folder / "generation_config.json").write_bytes(dump_json({"bos_token_id": 1, "eos_token_id": [2, *stops]}))
    return folder
