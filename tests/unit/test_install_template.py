"""`install --template FILE` puts a template no family describes on any tokenizer: the same plan, dry run, atomic
write and reload check as a family; its tokens declared, identified or inferred, and the plan says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice, get_family, plan_install

from ..helpers import GOOD, run, snapshot

TOOL_USE = GOOD.replace(
    "{%- if add_generation_prompt", "{%- if tools %}<tools>{%- endif %}{%- if add_generation_prompt"
)
PLAIN_END = (
    "{% for m in messages %}{{ m['role'] + ': ' + (m['content'] if m['content'] is string else '') + 'END_OF_TURN' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    written = {}
    for name, text in {"chatml": GOOD, "tool_use": TOOL_USE, "plain": PLAIN_END}.items():
        written[name] = tmp_path / f"{name}.jinja"
        written[name].write_text(text)
    return written


def test_inferred_tokens_are_registered_and_the_plan_says_so(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, files: dict[str, Path]
) -> None:
    from transformers import AutoTokenizer

    before = snapshot(toy_tokenizer)
    out = tmp_path / "out"
    code, stdout, _ = run(
        capsys,
        "install",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(out),
        "--template",
        str(files["chatml"]),
        "--dry-run",
        "--json",
    )
    plan = json.loads(stdout)
    assert code == 0 and not out.exists() and plan["family"] is None
    assert plan["tokens_from"] == "inferred from the template's renderings"
    assert [t["token"] for t in plan["tokens"]] == ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    # Tool-call tags are markup: added as plain tokens, one id each, kept by decoding for the parsers that read them.
    assert [t["action"] for t in plan["tokens"]][2:] == ["added-markup", "added-markup"]
    code, _, err = run(
        capsys, "install", "--tokenizer", str(toy_tokenizer), "--output", str(out), "--template", str(files["chatml"])
    )
    assert code == 0, err
    tok = AutoTokenizer.from_pretrained(str(out))
    for token in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        assert len(tok.encode(token, add_special_tokens=False)) == 1
    assert "<tool_call>" not in tok.all_special_tokens and "<|im_end|>" in tok.all_special_tokens
    assert tok.eos_token == "<|im_end|>" and tok.chat_template == GOOD
    assert (
        tok.convert_tokens_to_ids("<|im_end|>")
        in json.loads((out / "generation_config.json").read_text())["eos_token_id"]
    )
    assert snapshot(toy_tokenizer) == before


def test_named_templates(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, files: dict[str, Path]
) -> None:
    from transformers import AutoTokenizer

    out = tmp_path / "out"
    code, stdout, err = run(
        capsys,
        "install",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(out),
        "--template",
        str(files["chatml"]),
        "--template",
        f"tool_use={files['tool_use']}",
    )
    assert code == 0, err
    assert "add     additional_chat_templates/tool_use.jinja  (tool_use.jinja)" in stdout
    assert (out / "additional_chat_templates" / "tool_use.jinja").read_text() == TOOL_USE
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["chat_template"] == [
        {"name": "default", "template": GOOD},
        {"name": "tool_use", "template": TOOL_USE},
    ]
    assert AutoTokenizer.from_pretrained(str(out)).chat_template == {"default": GOOD, "tool_use": TOOL_USE}


def test_a_turn_end_nothing_can_infer_must_be_declared(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path, files: dict[str, Path]
) -> None:
    from transformers import AutoTokenizer

    args = ["install", "--tokenizer", str(toy_tokenizer), "--template", str(files["plain"])]
    code, _, err = run(capsys, *args, "--output", str(tmp_path / "refused"))
    assert code == 2 and "no token ends an assistant turn" in err and "--stop-token TOKEN" in err
    assert not (tmp_path / "refused").exists()
    code, stdout, err = run(capsys, *args, "--output", str(tmp_path / "out"), "--stop-token", "END_OF_TURN")
    assert code == 0, err
    assert "tokens from: declared" in stdout
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    assert tok.eos_token == "END_OF_TURN" and len(tok.encode("END_OF_TURN", add_special_tokens=False)) == 1


def test_a_bundled_template_given_as_a_file_is_recognised(toy_tokenizer: Path, tmp_path: Path) -> None:
    variant = get_family("llama3.2-pythonic").variant()
    plan = plan_install(TemplateChoice(template=variant.template_path), toy_tokenizer, tmp_path / "out")
    assert plan.tokens_from == "the bundled family llama3.2-pythonic/corrected"
    assert [t.token for t in plan.tokens] == list(variant.control_tokens)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["gigachat3"], "give a family or --template, not both"),
        (["--variant", "corrected"], "--variant picks a family's variant"),
        (["--all"], "--all installs every family"),
        (["--template", "default=x.jinja"], "names the template 'default' twice"),
    ],
)
def test_what_cannot_go_together(
    capsys: pytest.CaptureFixture[str],
    toy_tokenizer: Path,
    tmp_path: Path,
    files: dict[str, Path],
    extra: list[str],
    message: str,
) -> None:
    code, _, err = run(
        capsys,
        "install",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "o"),
        "--template",
        str(files["chatml"]),
        *extra,
    )
    assert code == 2 and message in err and "Traceback" not in err


def test_a_template_that_writes_eos_keeps_its_rendering(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    """Phi-3.5's template ends with {{ eos_token }}: setting eos to the turn's stop would change what it renders."""
    from transformers import AutoTokenizer

    template = tmp_path / "eos.jinja"
    template.write_text(GOOD + "{%- if not add_generation_prompt %}{{ eos_token }}{% endif %}")
    code, _, err = run(
        capsys,
        "install",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--template",
        str(template),
    )
    assert code == 0 and "the template writes {{ eos_token }}, so eos_token stays </s>" in err
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]
    installed = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    rendered = installed.apply_chat_template(messages, tokenize=False)
    assert (
        installed.eos_token == "</s>"
        and rendered.endswith("<|im_end|>\n</s>")
        and "<|im_end|>\n<|im_end|>" not in rendered
    )
    stop_id = installed.convert_tokens_to_ids("<|im_end|>")
    assert stop_id in json.loads((tmp_path / "out" / "generation_config.json").read_text())["eos_token_id"]


UNTRIMMED = (
    "{% for message in messages %}\n"
    "    {% if message['role'] == 'user' %}\n"
    "<|im_start|>user\n{{ message['content'] }}<|im_end|>\n"
    "    {% else %}\n"
    "<|im_start|>assistant\n{{ message['content'] }}<|im_end|>\n"
    "    {% endif %}\n"
    "{% endfor %}\n"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_port_installs_the_ported_template(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    """--port writes the template with the whitespace rewrite TGI needs; without it, the file as it is; and
    transformers renders both the same."""
    from transformers import AutoTokenizer

    from hf_chat_templates.template.engines.registry import engine_profiles
    from hf_chat_templates.template.rewrites import REWRITES

    (tgi,) = engine_profiles("tgi")
    if tgi.unavailable():
        pytest.skip("the tgi profile needs minijinja: pip install -e '.[reference]'")
    source = tmp_path / "untrimmed.jinja"
    source.write_text(UNTRIMMED, encoding="utf-8")
    args = ["install", "--tokenizer", str(toy_tokenizer), "--template", str(source), "--stop-token", "<|im_end|>"]
    code, stdout, err = run(capsys, *args, "--output", str(tmp_path / "ported"), "--port")
    assert code == 0, err
    assert "  port:\n    applied whitespace: " in stdout and "tgi +" in stdout
    code, stdout, err = run(capsys, *args, "--output", str(tmp_path / "as-is"))
    assert code == 0, err and "port:" not in stdout
    whitespace = next(r for r in REWRITES if r.name == "whitespace")
    assert (tmp_path / "ported" / "chat_template.jinja").read_text(encoding="utf-8") == whitespace.apply(UNTRIMMED)
    assert (tmp_path / "as-is" / "chat_template.jinja").read_text(encoding="utf-8") == UNTRIMMED
    ported, as_is = (AutoTokenizer.from_pretrained(str(tmp_path / name)) for name in ("ported", "as-is"))
    assert ported.chat_template != as_is.chat_template
    for messages in (
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}, {"role": "user", "content": "?"}],
    ):
        for prompt in (True, False):
            assert ported.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt) == (
                as_is.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
            )


def test_port_is_not_for_a_gguf_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "install", "chatml", "--gguf", str(tmp_path / "in.gguf"), "--output", str(tmp_path / "o"), "--port"
    )
    assert code == 2 and "--port cannot be used with --gguf" in err
