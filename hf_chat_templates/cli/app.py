"""The click group every command registers on, the options several commands share, and output helpers."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

if TYPE_CHECKING:
    from ..families.source import TemplateChoice

F = TypeVar("F", bound=Callable[..., Any])


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="hf-chat-templates")
def cli() -> None:
    """Install, verify and publish chat templates on Hugging Face tokenizers."""


class PathParam(click.Path):
    """A path option or argument that refuses an empty value (click would read it as the current folder)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty: give a path", param, ctx)
        return super().convert(value, param, ctx)


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


PROGRESS_ENV = "HF_CHAT_TEMPLATES_PROGRESS"


def progress_wanted(as_json: bool = False) -> bool:
    """Progress goes to stderr when it is a terminal, or when HF_CHAT_TEMPLATES_PROGRESS=1 (0: never); never with
    --json."""
    import sys

    if as_json:
        return False
    setting = os.environ.get(PROGRESS_ENV, "").strip()
    return setting == "1" if setting else sys.stderr.isatty()


def refuse_verbose_json(verbose: bool, as_json: bool) -> None:
    """`verify -v` lists every finding in the text output; with --json it would be ignored, so it is refused."""
    from ..errors import UsageError

    if verbose and as_json:
        raise UsageError(
            "--verbose is for the text output; --json carries each check's first five findings in "
            "detail.examples and would ignore it",
            hint="drop --verbose, or --json",
        )


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")(func)


def force_option(func: F) -> F:
    return click.option("--force", is_flag=True, help="Replace a non-empty --output (the old one is kept beside it).")(
        func
    )


def hub_options(what: str) -> Callable[[F], F]:
    """--revision and --token, for a command whose `what` may be a Hub repo id."""

    def decorate(func: F) -> F:
        func = click.option("--token", default=None, help="Hub token (default: HF_TOKEN or your login).")(func)
        return click.option("--revision", default=None, help=f"Hub revision when {what} is a repo id.")(func)

    return decorate


def template_options(family_help: str, template_help: str) -> Callable[[F], F]:
    """--family, --variant and --template: which template the command uses instead of the folder's own."""

    def decorate(func: F) -> F:
        func = click.option(
            "--template", "template_file", type=PathParam(path_type=Path), default=None, help=template_help
        )(func)
        func = click.option("--variant", default=None, help="The family's variant (default: its default variant).")(
            func
        )
        return click.option("--family", default=None, help=family_help)(func)

    return decorate


# The options that say which template a command uses and what is declared about it (a command has some of them):
# `pass_template_choice` hands them to the command as one TemplateChoice.
CHOICE_OPTIONS = (
    "family",
    "variant",
    "template_file",
    "templates",
    "kwarg_pairs",
    "stop_tokens",
    "control_tokens",
    "allow_unwritten_tokens",
)


def template_choice(params: Mapping[str, Any]) -> TemplateChoice:
    """The TemplateChoice the command line's options say (`CHOICE_OPTIONS`, by parameter name; those absent unset)."""
    from ..conversations.records import parse_kwargs
    from ..families.source import TemplateChoice

    templates = tuple(params.get("templates") or ())  # install's --template, repeatable: FILE or NAME=FILE
    return TemplateChoice(
        family=params.get("family"),
        variant=params.get("variant"),
        template=params.get("template_file") or (templates or None),
        kwargs=parse_kwargs(params.get("kwarg_pairs") or ()),
        stop_tokens=tuple(params.get("stop_tokens") or ()) or None,
        control_tokens=tuple(params.get("control_tokens") or ()) or None,
        allow_unwritten_tokens=bool(params.get("allow_unwritten_tokens")),
    )


def pass_template_choice(func: F) -> F:
    """The command receives `choice`, the TemplateChoice of its `CHOICE_OPTIONS`, in place of those options (which
    `click.get_current_context().params` still holds as given)."""

    @functools.wraps(func)
    def command(**params: Any) -> Any:
        others = {name: value for name, value in params.items() if name not in CHOICE_OPTIONS}
        return func(choice=template_choice(params), **others)

    return cast(F, command)


def _once(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """A repeatable token option's values, each once; a value given more than once is said, not dropped silently."""
    kept = tuple(dict.fromkeys(value))
    for token in kept:
        if (count := value.count(token)) > 1:
            warn(f"{param.opts[0]} {token!r} is given {count} times; it is declared once")
    return kept


def token_options(stop_help: str, control_help: str) -> Callable[[F], F]:
    """--stop-token and --control-token (repeatable): the tokens a user declares for a template."""

    def decorate(func: F) -> F:
        func = click.option(
            "--control-token", "control_tokens", multiple=True, metavar="TOKEN", help=control_help, callback=_once
        )(func)
        return click.option(
            "--stop-token", "stop_tokens", multiple=True, metavar="TOKEN", help=stop_help, callback=_once
        )(func)

    return decorate


def unwritten_option(func: F) -> F:
    """--allow-unwritten-token: a declared token the template never writes is meant."""
    return click.option(
        "--allow-unwritten-token",
        "allow_unwritten_tokens",
        is_flag=True,
        help="Accept a declared --stop-token or --control-token the template never writes (the model writes it "
        "though the template does not).",
    )(func)


def input_options(func: F) -> F:
    """How conversations are read: format, columns, split, and how many records may be left out."""
    func = click.option(
        "--max-skipped",
        default="0",
        show_default=True,
        metavar="N|P%",
        help="Records that cannot be read, normalized or rendered allowed before the run fails (records with "
        "nothing to train do not count).",
    )(func)
    func = click.option(
        "--split", default=None, help="The split of a datasets folder or Hub dataset (default: train)."
    )(func)
    func = click.option("--tools-column", default="tools", show_default=True, help="Column holding the tools.")(func)
    func = click.option(
        "--messages-column",
        default=None,
        help="Column holding the messages (default: messages; ShareGPT: conversations).",
    )(func)
    return click.option(
        "--input-format",
        type=click.Choice(["auto", "openai", "sharegpt", "messages"]),
        default="auto",
        show_default=True,
        help="Record format; auto decides per record.",
    )(func)


def kwarg_option(help_text: str) -> Callable[[F], F]:
    """--kwarg NAME=VALUE (repeatable), into the parameter `kwarg_pairs`."""
    return click.option("--kwarg", "kwarg_pairs", multiple=True, metavar="NAME=VALUE", help=help_text)


def declaration_options(func: F) -> F:
    """--kwarg, --stop-token and --control-token: what the user declares about a template."""
    func = token_options(
        "A token that ends an assistant turn (repeatable); replaces the family's or inferred.",
        "A control token the template writes (repeatable); checked with those found.",
    )(func)
    return kwarg_option("A template keyword, e.g. --kwarg date_string='26 Jul 2024' (JSON values are parsed).")(func)


def _add_family_folders(ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]) -> None:
    """Read families from these folders too, for this command (they go before HF_CHAT_TEMPLATES_FAMILIES); the
    registry forgets them when the command's context closes."""
    if value:
        from ..families.registry import family_folders

        ctx.with_resource(family_folders(value))


def families_option(func: F) -> F:
    """--families DIR: family folders of your own (each with a family.toml), beside the bundled ones."""
    return click.option(
        "--families",
        type=PathParam(path_type=Path),
        multiple=True,
        expose_value=False,
        is_eager=True,
        callback=_add_family_folders,
        metavar="DIR",
        help="Also read families from DIR (folders with a family.toml; repeatable; also HF_CHAT_TEMPLATES_FAMILIES).",
    )(func)


def written(what: str, path: Path) -> None:
    """Say on stderr where an output went."""
    from ..outputs import is_stdout

    click.echo(f"{what} written to standard output" if is_stdout(path) else f"{what} written: {path}", err=True)


def check_outputs(outputs: dict[str, Path | None], as_json: bool = False) -> bool:
    """Refuse two outputs of one command to the same file (the second would replace the first), and two to standard
    output (`-`, or --json); return whether one goes to standard output, where the text report must then not go."""
    from ..errors import UsageError
    from ..outputs import check_regular_target, is_stdout

    given = {flag: path for flag, path in outputs.items() if path is not None}
    to_stdout = [flag for flag, path in given.items() if is_stdout(path)] + (["--json"] if as_json else [])
    if len(to_stdout) > 1:
        raise UsageError(
            f"{' and '.join(to_stdout)} would {'both' if len(to_stdout) == 2 else 'all'} write to standard output",
            hint="send all but one of them to a file",
        )
    seen: dict[Path, str] = {}
    for flag, path in given.items():
        if is_stdout(path):
            continue
        key = Path(os.path.realpath(path))
        if key in seen:
            raise UsageError(
                f"{seen[key]} and {flag} both write {path}; the second would replace the first",
                hint=f"give {flag} another file",
            )
        seen[key] = flag
        check_regular_target(Path(path))  # before the command's work, not after it
    return len(to_stdout) == 1 and not as_json


def write_html(path: Path, results: list[Any]) -> None:
    """verify's --html: the report page of (report, context) pairs, written whole, and where it went."""
    from ..outputs import write_file
    from ..view.report import verification_html

    write_file(path, verification_html(results))
    written("report", path)
