"""Where a turn begins and ends: a turn end written where no turn is open (`structure`), whitespace trained between
a tool-call turn's last call and its stop token, and the template's indentation trained before an answer
(`completion-matches-content`). Each rule fails on a small broken template and the legitimate shape stays silent."""

from __future__ import annotations

from pathlib import Path

from ..helpers import GOOD, check, context

# GOOD, its tool instructions written outside any turn but closed with the turn end (vLLM's Hermes tool template)
TOOLS_OUTSIDE_A_TURN = GOOD.replace(
    "{{- '<|im_start|>tools\\n' + tools | tojson + '<|im_end|>\\n' -}}",
    "{{- 'Tools: ' + tools | tojson + '<|im_end|>' -}}",
)
# GOOD, each call followed by a space, so a call turn ends '</tool_call> <|im_end|>'
SPACE_AFTER_CALLS = GOOD.replace("+ '</tool_call>' -}}", "+ '</tool_call> ' -}}")
# No turn tokens and no stop: the lines' indentation written around every message (vLLM's Tele-FLM template)
INDENTED = (
    "{% for m in messages %}\n"
    "    {% if m.role == 'user' %}\n"
    "        {{ 'User: ' + m.content + '\\nBot:' }}\n"
    "    {% elif m.role == 'assistant' %}\n"
    "        {{ m.content }}\n"
    "    {% endif %} \n"
    "{% endfor %}"
)
# The same format with one space between the header and the answer (`Bot: answer`, as `[/INST] answer`)
ONE_SPACE = (
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{{- 'User: ' + m.content + '\\nBot:' -}}"
    "{%- elif m.role == 'assistant' -%}{{- ' ' + m.content + '\\n' -}}{%- endif -%}{%- endfor -%}"
)


def test_a_turn_end_no_turn_opened_fails(good: Path) -> None:
    result = check(context(good, TOOLS_OUTSIDE_A_TURN), "structure")
    assert result.status == "fail" and result.severity == "error" and result.cause == "template"
    assert result.probe is not None and result.message.startswith(f"probe {result.probe}: <|im_end|> at char ")
    assert "(in message 0's part of the rendering" in result.message
    assert "closes a turn that no <|im_start|> opened" in result.message
    assert "the model is shown a turn end where no turn began" in result.message
    assert result.detail["token"] == "<|im_end|>" and result.detail["char_position"] > 0
    assert "open that turn with <|im_start|> and its role" in (result.hint or "")


def test_turns_opened_before_their_end_stay_silent(good: Path, toy_tokenizer: Path) -> None:
    assert check(context(good), "structure").status == "pass"
    # a closer that content follows (a header's end) is no turn end: not judged where it stands alone
    header = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '<|im_end|>' + m.content -}}{%- endfor -%}"
        "{%- if tools -%}{{- '<|im_end|>tools' -}}{%- endif -%}"
    )
    assert "closes a turn" not in check(context(good, header), "structure").message


def test_whitespace_between_a_call_and_the_stop_fails(good: Path) -> None:
    result = check(context(good, SPACE_AFTER_CALLS), "completion-matches-content")
    assert result.status == "fail" and result.severity == "error"
    assert result.probe is not None and result.message.startswith(f"probe {result.probe}: message 1 (a tool-call turn)")
    assert "after its calls comes '·' before the stop token <|im_end|> at char " in result.message
    assert "</tool_call>⟨here⟩·<|im_end|>" in result.message
    assert result.detail["message_index"] == 1 and result.detail["extra"] == " "
    assert "write <|im_end|> right after a call turn's last call" in (result.hint or "")


def test_a_call_turn_ending_at_its_stop_stays_silent(good: Path) -> None:
    result = check(context(good), "completion-matches-content")
    assert result.status == "pass", result.message
    between = GOOD.replace("{{- '<tool_call>'", "{{- (' ' if not loop.first else '') + '<tool_call>'")
    assert check(context(good, between), "completion-matches-content").status == "pass"


def test_indentation_before_an_answer_fails_without_a_stop_token(toy_tokenizer: Path) -> None:
    ctx = context(toy_tokenizer, INDENTED)
    assert ctx.stop_tokens == ()
    result = check(ctx, "completion-matches-content")
    assert result.status == "fail" and result.severity == "error"
    assert result.probe is not None and result.message.startswith(f"probe {result.probe}: message 1: ")
    assert "the trained completion starts with '········' (8 whitespace characters" in result.message
    assert "and '\\n·\\n' after it" in result.message
    assert result.detail["lead"] == " " * 8 and result.detail["char_position"] > 0
    assert "whitespace control" in (result.hint or "")


def test_one_space_before_an_answer_is_the_formats(toy_tokenizer: Path) -> None:
    result = check(context(toy_tokenizer, ONE_SPACE), "completion-matches-content")
    assert result.status == "pass", result.message


def test_indentation_before_an_answer_fails_with_a_stop_token(good: Path) -> None:
    broken = GOOD.replace(
        "{%- if m.content is string -%}{{- m.content -}}",
        "{%- if m.content is string -%}{{- ('\\n    ' if m.role == 'assistant' else '') + m.content -}}",
    )
    result = check(context(good, broken), "completion-matches-content")
    assert result.status == "fail"
    assert "the trained completion starts with '\\n····' (5 whitespace characters" in result.message


# The calls, then a line break, then the turn's text (MiniCPM's `<|tool_call_end|>\n` + content + `<|im_end|>`)
CALLS_THEN_TEXT = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- for c in m.tool_calls or [] -%}{{- '<tool_call>' + c.function.name + ' ' + (c.function.arguments "
    "if c.function.arguments is string else c.function.arguments | tojson) + '</tool_call>' -}}{%- endfor -%}"
    "{%- if m.tool_calls -%}{{- '\\n' -}}{%- endif -%}"
    "{%- if m.content is string -%}{{- m.content -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_the_separator_before_a_call_turns_text_is_the_formats(good: Path) -> None:
    """Written with no text too, the line break is the format's: the model writes it, then its text or the stop.
    Where no text ever follows it, it is whitespace before the stop only."""
    result = check(context(good, CALLS_THEN_TEXT), "completion-matches-content")
    assert "(a tool-call turn)" not in result.message, result.message
    no_text = CALLS_THEN_TEXT.replace(
        "{%- if m.content is string -%}", "{%- if m.content is string and not m.tool_calls -%}"
    )
    result = check(context(good, no_text), "completion-matches-content")
    assert result.status == "fail" and "(a tool-call turn): after its calls comes '\\n' before" in result.message


def test_a_turn_joined_to_the_one_before_by_a_skipped_message_is_not_judged(good: Path) -> None:
    """A template without tools skips the tool result, and writes the assistant's header in the user's branch
    (Phi-3): the answer after the result has no header, as a dropped message leaves it (nothing-dropped's)."""
    skips = (
        "{%- for m in messages -%}{%- if m.role == 'user' -%}"
        "{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n<|im_start|>assistant\\n' -}}"
        "{%- elif m.role == 'assistant' -%}{{- (m.content or '') + '<|im_end|>\\n' -}}{%- endif -%}{%- endfor -%}"
    )
    result = check(context(good, skips), "structure")
    assert "closes a turn" not in result.message, result.message
