"""Library errors carry data (`path`, `key`, `line`, `parameter`) and name arguments with `errors.option(name)`:
`str(err)` writes the Python parameter, the CLI writes the option that sets it; a user's text is never rewritten."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hf_chat_templates import errors
from hf_chat_templates.cli.main import option_name
from hf_chat_templates.errors import (
    ConfigError,
    HfChatTemplatesError,
    OutputExistsError,
    TemplateError,
    UsageError,
    option,
)

from ..helpers import run

# ---- the error object ------------------------------------------------------------------------------------------


def test_error_carries_its_data() -> None:
    err = UsageError(
        f"bad {option('output')}", hint=f"pass {option('force')}", path="a/b", key="k", line=3, parameter="output"
    )
    assert (err.path, err.key, err.line, err.parameter) == (Path("a/b"), "k", 3, "output")
    assert isinstance(err.path, Path)
    assert str(err) == "bad output" and err.hint == "pass force"
    bare = HfChatTemplatesError("plain")
    assert (bare.path, bare.key, bare.line, bare.parameter, bare.hint) == (None, None, None, None, None)
    assert isinstance(err, ValueError) and isinstance(err, HfChatTemplatesError)


def test_option_name() -> None:
    assert option_name("max_length") == "--max-length"
    assert option_name("kwargs") == "--kwarg"
    assert option_name("output") == "--output"
    assert option_name("skip_verify") == "--skip-verify"
    assert option_name("source") == "SOURCE"  # an argument, not an option


def test_placeholders_render_both_ways() -> None:
    err = UsageError(
        f"{option('max_length')} must be at least 1; {option('kwargs')} and {option('repo_id')} too",
        hint=f"pass {option('force')} or another {option('output')}",
    )
    assert str(err) == "max_length must be at least 1; kwargs and repo_id too"
    assert err.message == str(err)
    assert err.hint == "pass force or another output"
    assert err.render(err.template, option_name) == "--max-length must be at least 1; --kwarg and --repo-id too"
    assert err.render(err.hint_template or "", option_name) == "pass --force or another --output"


def test_every_known_parameter_is_a_placeholder() -> None:
    for name in errors.PARAMETERS:
        assert HfChatTemplatesError.render(f"<{option(name)}>") == f"<{name}>"
        assert HfChatTemplatesError.render(f"<{option(name)}>", option_name) == f"<{option_name(name)}>"


def test_only_known_parameters_can_be_named() -> None:
    with pytest.raises(ValueError, match="not a parameter"):
        option("no_such_parameter")


@pytest.mark.parametrize(
    "text",
    [
        'pass a JSONL file of {"messages": [...]}',
        '{"messages": [{"role": "user"}], "tools": []}',
        "the {% generation %} markers of the folder's template",
        "{%- generation -%}{{ messages }}{%- endgeneration -%}",
        "{{ output }} and { force } with spaces",
        "/data/{x}/tokenizer.json",
        "{unknown_name} and {Output} and {max-length} and {}",
        "a user's {output} and {force} and {max_length}: braces are never placeholders",
    ],
)
def test_other_braces_are_left_untouched(text: str) -> None:
    err = UsageError(text, hint=text)
    assert str(err) == text and err.hint == text
    assert err.render(text, option_name) == text


def test_mixed_placeholders_and_braces() -> None:
    err = UsageError(f'{option("conversations")} must hold {{"messages": [...]}} per line, not {{x}}')
    assert err.render(err.template, option_name) == '--conversations must hold {"messages": [...]} per line, not {x}'


def test_training_features_max_length_zero() -> None:
    from hf_chat_templates import TrainingFeatures

    with pytest.raises(UsageError) as info:
        TrainingFeatures("no/such/folder", max_length=0)  # refused before any tokenizer is loaded
    assert info.value.parameter == "max_length"
    assert str(info.value) == "max_length must be at least 1, not 0"
    assert info.value.render(info.value.template, option_name) == "--max-length must be at least 1, not 0"


def test_check_output_names_force(tmp_path: Path) -> None:
    from hf_chat_templates.outputs import check_output

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f").write_text("x")
    with pytest.raises(OutputExistsError) as info:
        check_output(tmp_path / "out", force=False)
    assert info.value.path == tmp_path / "out" and info.value.parameter == "output"
    assert "pass force to replace it" in (info.value.hint or "")
    assert "--force" not in (info.value.hint or "")


# ---- the CLI words them as options -----------------------------------------------------------------------------


@pytest.fixture
def prepare_args(toy_tokenizer: Path, tmp_path: Path) -> list[str]:
    conversations = tmp_path / "c.jsonl"
    conversations.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    return ["prepare", str(toy_tokenizer), "--conversations", str(conversations), "--output", str(tmp_path / "o")]


def test_cli_prepare_max_length_zero(
    capsys: pytest.CaptureFixture[str], prepare_args: list[str], tmp_path: Path
) -> None:
    pytest.importorskip("datasets")
    code, _, err = run(capsys, *prepare_args, "--max-length", "0")
    assert code == 2
    assert "error: --max-length must be at least 1, not 0" in err
    assert "to fix: --max-length 4096" in err
    assert "max_length" not in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_cli_prepare_bad_kwarg(capsys: pytest.CaptureFixture[str], prepare_args: list[str]) -> None:
    code, _, err = run(capsys, *prepare_args, "--kwarg", "bad")
    assert code == 2
    assert "error: --kwarg 'bad' is not NAME=VALUE" in err
    assert "to fix: --kwarg date_string='26 Jul 2024'" in err
    assert "kwargs" not in err


def test_cli_install_into_non_empty_output(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "install", "gigachat3", "--tokenizer", str(toy_tokenizer), "--output", str(out))
    assert code == 2
    assert f"error: {out}: exists and is not empty" in err
    assert "--force" in err and "choose another --output" in err
    assert "pass force " not in err and "Traceback" not in err
    assert (out / "keep.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_cli_user_text_with_a_parameter_name_in_braces_is_not_rewritten(
    capsys: pytest.CaptureFixture[str], prepare_args: list[str]
) -> None:
    code, _, err = run(capsys, *prepare_args, "--kwarg", "{force}")
    assert code == 2
    assert "error: --kwarg '{force}' is not NAME=VALUE" in err


def test_cli_path_with_a_parameter_name_in_braces_is_not_rewritten(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    out = tmp_path / "{output}"
    out.mkdir()
    (out / "f").write_text("x")
    code, _, err = run(capsys, "install", "gigachat3", "--tokenizer", str(toy_tokenizer), "--output", str(out))
    assert code == 2
    assert f"error: {out}: exists and is not empty" in err


# ---- errors that carry a file, a key, a line -------------------------------------------------------------------


def test_config_error_names_file_and_key(tmp_path: Path) -> None:
    from hf_chat_templates.families.registry import load_family

    folder = tmp_path / "broken"
    folder.mkdir()
    file = folder / "family.toml"
    file.write_text(
        'name = "broken"\ndefault_variant = "v"\nbase_tokenizer = "llama3"\nstop_tokenz = ["<|end|>"]\n'
        '[variants.v]\ntemplate = "v.jinja"\n'
    )
    (folder / "v.jinja").write_text("{{ messages }}")
    with pytest.raises(ConfigError) as info:
        load_family(folder)
    assert info.value.path == file
    assert info.value.key == "stop_tokenz"
    assert "unknown key 'stop_tokenz'" in str(info.value) and "did you mean 'stop_tokens'" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_config_error_names_a_nested_key(tmp_path: Path) -> None:
    from hf_chat_templates.families.registry import load_family

    folder = tmp_path / "nested"
    folder.mkdir()
    file = folder / "family.toml"
    file.write_text(
        'name = "nested"\ndefault_variant = "v"\nbase_tokenizer = "llama3"\n'
        '[variants.v]\ntemplate = "v.jinja"\ncontrol_tokens = ["<|end|>"]\nstop_tokens = ["<|end|>"]\nbogus = 1\n'
    )
    (folder / "v.jinja").write_text("{{ messages }}<|end|>")
    with pytest.raises(ConfigError) as info:
        load_family(folder)
    assert info.value.path == file
    assert info.value.key is not None and info.value.key.endswith("bogus") and info.value.key.startswith("variants.v")


def test_template_error_names_file_and_line() -> None:
    from hf_chat_templates.template.syntax import check_template_syntax

    with pytest.raises(TemplateError) as info:
        check_template_syntax("{% if %}", "x.jinja")
    assert info.value.line == 1 and info.value.path == Path("x.jinja")
    assert str(info.value).startswith("x.jinja, line 1: the chat template does not parse")
    with pytest.raises(TemplateError) as later:
        check_template_syntax("fine\n{{ ok }}\n{% for %}", "y.jinja")
    assert later.value.line == 3
    check_template_syntax("{% if x %}{% generation %}y{% endgeneration %}{% endif %}", "z.jinja")  # parses


# ---- --json: one document on stdout, also when the command fails -------------------------------------------------


def test_json_on_exit_2_is_one_document(
    capsys: pytest.CaptureFixture[str], toy_tokenizer: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, stdout, stderr = run(
        capsys, "install", "gigachat3", "--tokenizer", str(toy_tokenizer), "--output", str(out), "--json"
    )
    assert code == 2 and "error:" in stderr
    doc = json.loads(stdout)
    assert doc["exit_code"] == 2 and doc["error"]["type"] == "OutputExistsError"
    assert doc["error"]["option"] == "--output" and doc["error"]["path"] == str(out.absolute())
    assert "--force" in doc["error"]["hint"]


def test_json_on_a_usage_error_of_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "verify", "--no-such-option", "--json")
    assert code == 2 and json.loads(stdout)["error"]["type"] == "NoSuchOption"


def test_without_json_stdout_stays_empty_on_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, stdout, stderr = run(capsys, "verify", str(tmp_path / "missing"))
    assert code == 2 and stdout == "" and "no such folder" in stderr


# ---- exit 3: an internal error, not the user's input ------------------------------------------------------------


def _fails_with(err: BaseException) -> object:
    def render_run() -> object:
        raise err

    return render_run


@pytest.mark.parametrize("err", [RuntimeError("boom"), KeyError("x"), AttributeError("'NoneType' has no 'y'")])
def test_an_unexpected_error_exits_3_and_asks_for_a_report(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, err: Exception
) -> None:
    monkeypatch.setattr(sys.modules["hf_chat_templates.cli.main"], "render_run", _fails_with(err))
    monkeypatch.delenv("HF_CHAT_TEMPLATES_DEBUG", raising=False)
    code, stdout, stderr = run(capsys, "verify", "x")
    assert code == 3 and stdout == "" and "Traceback" not in stderr
    assert f"unexpected {type(err).__name__}" in stderr and "internal error" in stderr
    assert "HF_CHAT_TEMPLATES_DEBUG=1" in stderr and "report this" in stderr
    code, stdout, _ = run(capsys, "verify", "x", "--json")
    assert code == 3 and json.loads(stdout)["exit_code"] == 3


@pytest.mark.parametrize(
    "err, code",
    [
        (errors.UsageError("bad"), 2),
        (errors.TokenizerFolderError("gone"), 2),
        (errors.MissingDependencyError("needs x"), 2),
        (KeyboardInterrupt(), 2),
    ],
)
def test_input_errors_and_interrupts_keep_their_exit_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, err: BaseException, code: int
) -> None:
    monkeypatch.setattr(sys.modules["hf_chat_templates.cli.main"], "render_run", _fails_with(err))
    got, _, stderr = run(capsys, "verify", "x")
    assert got == code and "report this" not in stderr


def test_the_exit_code_table() -> None:
    from hf_chat_templates.cli.main import Terminated, exit_code
    from hf_chat_templates.publish.hub import VerificationFailed

    assert exit_code(ValueError("x")) == 3 and exit_code(OSError("x")) == 3  # builtins not raised on purpose
    assert exit_code(errors.UsageError("x")) == 2 and exit_code(Terminated()) == 143
    assert exit_code(VerificationFailed.__new__(VerificationFailed)) == 1
