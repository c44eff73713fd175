"""Token inference that survives a template's crash, on real templates (tests/data/structure, and the corpus): a
probe that raises is read again as it would otherwise be sent; the stop is the token that closes the earlier
answers when the last one is closed otherwise; and a template with no stop token is one error, every other check
still run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from hf_chat_templates import TemplateChoice
from hf_chat_templates.families.tokens import render_surviving, template_tokens
from hf_chat_templates.installation.subject import from_templates
from hf_chat_templates.template.rendering import Renderer
from hf_chat_templates.verification.results import STOP_TOKEN_HINT
from hf_chat_templates.verification.runner import run_checks

from ..helpers import CORPUS, context, run

REAL = Path(__file__).resolve().parent.parent / "data" / "structure"
DEEPSEEK_TOOL_TOKENS = ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"]


@pytest.fixture(scope="module")
def toy(toy_tokenizer_master: Path) -> Any:
    return AutoTokenizer.from_pretrained(str(toy_tokenizer_master))


def _tokens(toy: Any, template: str) -> Any:
    return template_tokens(toy, template, generation_config={"eos_token_id": 2})


def test_a_probe_that_raises_on_none_content_is_read_with_empty_content(toy: Any) -> None:
    template = "{% for m in messages %}{{ m.role + ': ' + m['content'] + '<|end|>' }}{% endfor %}"
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": []}]
    rendered, how = render_surviving(Renderer(toy, template), messages)
    assert rendered.ok and rendered.text == "user: Hi<|end|>assistant: <|end|>"
    assert how == 'None contents given as ""'


def test_deepseek_tool_call_tokens_are_found_though_its_tool_calls_raise(toy: Any) -> None:
    """DeepSeek-V3.1 concatenates `message['content']` (None beside tool calls) and the arguments (a dict): every
    tool-call probe raises, and its tool-call tokens were never registered."""
    template = (REAL / "deepseek-v3.1.jinja").read_text(encoding="utf-8")
    found = _tokens(toy, template)
    assert set(DEEPSEEK_TOOL_TOKENS) <= set(found.markup_tokens) | set(found.control_tokens)
    assert found.stop_tokens == ("<｜end▁of▁sentence｜>",)


def test_install_registers_deepseek_tool_call_tokens(toy: Any) -> None:
    subject = from_templates(
        TemplateChoice(template=REAL / "deepseek-v3.1.jinja"), toy, generation_config={"eos_token_id": 2}
    )
    assert set(DEEPSEEK_TOOL_TOKENS) <= set(subject.markup_tokens) | set(subject.control_tokens)


def test_phi4_mini_ends_a_turn_with_end(toy: Any) -> None:
    """llama.cpp's Phi-4-mini template tests `tools is defined`, true for the None transformers passes, and loops
    over it: a conversation without tools raises. Read with a tool given, <|end|> ends every turn."""
    template = (REAL / "phi-4-mini-llama-cpp.jinja").read_text(encoding="utf-8")
    found = _tokens(toy, template)
    assert found.stop_tokens[0] == "<|end|>" and found.turn_end
    assert "a plain two-exchange conversation raises; read with a tool given" in found.notes
    assert not any("no token ends an assistant turn" in n for n in found.notes)
    subject = from_templates(
        TemplateChoice(template=REAL / "phi-4-mini-llama-cpp.jinja"), toy, generation_config={"eos_token_id": 2}
    )
    assert subject.stop_tokens[0] == "<|end|>"


def test_kimi_k2_tokens(toy: Any) -> None:
    found = _tokens(toy, (REAL / "kimi-k2.jinja").read_text(encoding="utf-8"))
    assert found.stop_tokens == ("<|im_end|>",) and found.turn_end
    assert {"<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"} <= set(found.control_tokens)


def test_harmony_keeps_its_last_answers_own_end(toy: Any) -> None:
    """gpt-oss ends earlier answers with <|end|> and the last with <|return|>, written as such: on a tokenizer that
    lists neither, <|return|> stays the stop (the earlier answers' end is taken only for `{{ eos_token }}`)."""
    found = _tokens(toy, (CORPUS / "gpt-oss" / "chat_template.jinja").read_text(encoding="utf-8"))
    assert found.stop_tokens[0] == "<|return|>"


def test_no_stop_token_is_one_error_and_every_other_check_runs(toy_tokenizer: Path) -> None:
    template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    template += "{% if add_generation_prompt %}assistant: {% endif %}"
    ctx = context(toy_tokenizer, template)
    assert ctx.stop_tokens == ()
    ids = ["renders", "completion-matches-content", "structure", "assistant-mask", "stop-token-registered"]
    results = {r.id: r for r in run_checks(ctx, ids)}
    errors = [r for r in results.values() if r.severity == "error"]
    assert [r.id for r in errors] == ["stop-token-registered"]
    assert errors[0].message.startswith("no stop token: no token ends an assistant turn")
    assert STOP_TOKEN_HINT in (errors[0].hint or "") and "--stop-token TOKEN" in (errors[0].hint or "")
    assert results["assistant-mask"].status == "skip" and "no stop token is known" in results["assistant-mask"].message
    # The answer's text is still compared with the content, up to where the next turn begins
    completion = results["completion-matches-content"]
    assert completion.status == "pass" and "no stop token is known" in completion.message
    assert results["renders"].status == "pass"


def test_prepare_and_install_refusals_for_a_missing_stop_name_the_option(
    toy_tokenizer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "c.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}\n')
    plain = tmp_path / "plain.jinja"
    plain.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", encoding="utf-8")
    args = ["--template", str(plain), "--conversations", str(data), "--output", str(tmp_path / "ds")]
    code, _, err = run(capsys, "prepare", str(toy_tokenizer), *args)
    assert code == 2 and "no token ends an assistant turn" in err and "--stop-token TOKEN" in err
    args = ["--template", str(plain), "--tokenizer", str(toy_tokenizer), "--output", str(tmp_path / "o")]
    code, _, err = run(capsys, "install", *args)
    assert code == 2 and "--stop-token TOKEN" in err and "verify SRC --template FILE runs every other check" in err


def test_deepseek_r1_tool_calls_begin_written_for_the_first_call_only_is_markup(toy: Any) -> None:
    """DeepSeek-R1-Distill writes <｜tool▁calls▁begin｜> for a conversation's first call only (its `ns.is_first` is
    never reset), so it is not written once more per round; it is written for a call where an answer has none."""
    found = _tokens(toy, (CORPUS / "deepseek-r1-distill-qwen" / "chat_template.jinja").read_text(encoding="utf-8"))
    assert {"<｜tool▁calls▁begin｜>", *DEEPSEEK_TOOL_TOKENS} <= set(found.markup_tokens)
    qwen = _tokens(toy, (CORPUS / "qwen2.5" / "chat_template.jinja").read_text(encoding="utf-8"))
    assert "<tools>" not in qwen.markup_tokens  # the tool declarations' tags are written either way
