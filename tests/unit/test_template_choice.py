"""One `TemplateChoice` carries which template a command uses and what is declared about it, from the command line's
options to where the template is resolved: every part of it reaches every command, from Python as from the CLI."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice, get_family, install, plan_install, verify
from hf_chat_templates.cli.app import CHOICE_OPTIONS, cli, template_choice
from hf_chat_templates.cli.main import main  # noqa: F401  (registers every command on `cli`)
from hf_chat_templates.errors import UsageError
from hf_chat_templates.families.source import as_choice, choose_template

from ..helpers import GOOD

NEVER_WRITTEN = "the template never writes the declared token '<|nope|>'"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "chat.jinja"
    path.write_text(GOOD, encoding="utf-8")
    return path


def test_allow_unwritten_tokens_reaches_install_and_verify_from_python(
    good: Path, template: Path, tmp_path: Path
) -> None:
    # install() and verify() once took the declared tokens but not this flag, so Python could not say it
    declared = TemplateChoice(template=template, stop_tokens=["<|nope|>"])
    with pytest.raises(UsageError, match=f"^{NEVER_WRITTEN.replace('|', '[|]')}"):
        install(declared, good, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    allowed = TemplateChoice(template=template, stop_tokens=["<|nope|>"], allow_unwritten_tokens=True)
    assert install(allowed, good, tmp_path / "out").plan.stop_token_ids == (402,)  # <|nope|>, added
    with pytest.raises(UsageError, match=f"^{NEVER_WRITTEN.replace('|', '[|]')}"):
        verify(good, declared, only=["renders"])
    assert verify(good, allowed, only=["renders"]).check("renders").status == "pass"


def test_a_family_or_its_name_stands_for_the_choice_of_that_family() -> None:
    family = get_family("llama3.2-pythonic")
    assert as_choice("llama3.2-pythonic") == TemplateChoice(family="llama3.2-pythonic")
    assert as_choice(family) == TemplateChoice(family=family)
    assert as_choice(None) == TemplateChoice()
    choice = TemplateChoice(template="chat.jinja", stop_tokens=["<|im_end|>"])
    assert as_choice(choice) is choice
    assert choice.stop_tokens == ("<|im_end|>",)  # a list is kept as a tuple: equal choices compare equal
    assert choice == TemplateChoice(template="chat.jinja", stop_tokens=("<|im_end|>",))


def test_a_family_name_installs_as_its_choice(toy_tokenizer: Path, tmp_path: Path) -> None:
    by_name = plan_install("llama3.2-pythonic", toy_tokenizer, tmp_path / "a")
    by_choice = plan_install(TemplateChoice(family="llama3.2-pythonic"), toy_tokenizer, tmp_path / "b")
    assert (
        (by_name.family, by_name.variant) == (by_choice.family, by_choice.variant) == ("llama3.2-pythonic", "corrected")
    )
    assert by_name.template_sha256 == by_choice.template_sha256


def test_a_command_that_reads_one_template_refuses_named_ones(good: Path, template: Path) -> None:
    choice = TemplateChoice(template=[str(template), f"tool_use={template}"])
    with pytest.raises(UsageError) as caught:
        choose_template(good, choice)
    assert str(caught.value) == "template names templates (tool_use); this command reads one template"
    assert caught.value.hint == "give one template FILE (named templates are installed with install)"
    assert TemplateChoice(template=[str(template)]).template_file() == template


def test_the_command_line_options_become_one_choice() -> None:
    params = {
        "family": None,
        "variant": None,
        "template_file": Path("chat.jinja"),
        "kwarg_pairs": ("date_string=26 Jul 2024", "flag=true"),
        "stop_tokens": ("<|im_end|>",),
        "control_tokens": (),
        "allow_unwritten_tokens": True,
        "only": "renders",
    }
    assert template_choice(params) == TemplateChoice(
        template=Path("chat.jinja"),
        kwargs={"date_string": "26 Jul 2024", "flag": True},
        stop_tokens=("<|im_end|>",),
        allow_unwritten_tokens=True,
    )
    assert template_choice({"templates": ("a.jinja", "tool_use=b.jinja")}).template == ("a.jinja", "tool_use=b.jinja")
    assert template_choice({}) == TemplateChoice()


@pytest.mark.parametrize("name", ["install", "verify", "prepare", "view"])
def test_each_command_takes_its_template_options_as_one_choice(name: str) -> None:
    command = cli.commands[name]
    options = {p.name for p in command.params} & set(CHOICE_OPTIONS)
    assert options, f"{name} declares none of the template options"
    callback = inspect.signature(command.callback.__wrapped__)  # type: ignore[union-attr]
    assert "choice" in callback.parameters
    assert set(callback.parameters) & set(CHOICE_OPTIONS) == set()
