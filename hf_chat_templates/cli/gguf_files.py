"""GGUF files on the command line: `verify FILE.gguf [--against FOLDER]` and `install ... --gguf IN.gguf`.

`verify` runs every check on the tokenizer transformers builds from the file's metadata (saved as a temporary
folder, removed afterwards), then compares it with FOLDER when `--against` is given, and compares token ids with
llama.cpp when llama-cpp-python is installed. The exit code is 1 when a check fails or a difference is found.
"""

from __future__ import annotations

import functools
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..gguf.reading import is_gguf
from .app import PathParam, check_outputs, emit_json, refuse_verbose_json, template_choice, warn, write_html

if TYPE_CHECKING:
    from ..families.source import TemplateChoice

F = TypeVar("F", bound=Callable[..., Any])
AGAINST = "gguf_against"
# Options verify cannot use with a GGUF file, by parameter name.
_NOT_WITH_GGUF = {
    "conversations": "--conversations",
    "revision": "--revision",
    "token": "--token",
    "workers": "--workers",
    "all_families": "--all",
    "sarif_out": "--sarif",
    "baseline": "--baseline",
}


def _remember_against(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    ctx.meta[AGAINST] = value


def against_option(func: F) -> F:
    """--against FOLDER, for a GGUF SOURCE; the command it decorates hands a GGUF SOURCE (or --against) to
    `verify_gguf` before its own body runs."""

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        verify_gguf_if_given()
        return func(*args, **kwargs)

    return click.option(
        "--against",
        type=PathParam(path_type=Path),
        default=None,
        expose_value=False,
        callback=_remember_against,
        metavar="FOLDER",
        help="With a GGUF SOURCE: also compare its template, special tokens, bos and stop ids with this tokenizer "
        "folder; exit 1 on a difference.",
    )(command)  # type: ignore[return-value]


def verify_gguf_if_given() -> None:
    """In `verify`: when SOURCE is a GGUF file or --against is given, verify the GGUF file and exit."""
    ctx = click.get_current_context()
    params = {**ctx.params, "against": ctx.meta.get(AGAINST)}
    if params["against"] is not None or is_gguf(params.get("source")):
        verify_gguf(params)


def _refuse(params: dict[str, Any]) -> None:
    from ..errors import UsageError

    if ignored := [flag for name, flag in _NOT_WITH_GGUF.items() if params.get(name)]:
        raise UsageError(
            f"{', '.join(ignored)} cannot be used with a GGUF file or --against",
            hint="verify the tokenizer folder instead, or drop " + ", ".join(ignored),
        )
    source = params["source"]
    if not source:
        raise UsageError("missing SOURCE, the GGUF file to verify", hint="hf-chat-templates verify FILE.gguf")
    if not is_gguf(source):
        raise UsageError(
            f"--against compares a GGUF file with a tokenizer folder; {source!r} is not a GGUF file",
            hint="hf-chat-templates verify FILE.gguf --against FOLDER",
        )


def _verify_folder(folder: Path, params: dict[str, Any], gguf: Path) -> tuple[Any, Any]:
    from ..verification.runner import verify_with_context

    only = params.get("only")
    extra = {"engines": params["engines"]} if params.get("engines") else {}
    return verify_with_context(
        folder,
        template_choice(params),
        only=[c.strip() for c in only.split(",") if c.strip()] if only else None,
        training=params.get("training", False),
        sanitize=params.get("sanitize", False),
        gguf=gguf,
        **extra,
    )


def verify_gguf(params: dict[str, Any]) -> None:
    """`verify` for a GGUF file; `params` are the verify command's. Exits."""
    from ..gguf import read_gguf
    from ..gguf.comparing import compare_gguf
    from ..gguf.loading import gguf_tokenizer_folder
    from ..gguf.parity import llama_cpp_parity
    from .ollama_profile import ollama_template

    _refuse(params)
    refuse_verbose_json(params.get("verbose", False), params.get("as_json", False))
    to_stderr = check_outputs({"--html": params.get("html_out")}, params.get("as_json", False))
    gguf = read_gguf(params["source"])
    notes = []
    with tempfile.TemporaryDirectory(prefix="hfct-gguf-") as tmp:
        folder = gguf_tokenizer_folder(gguf, Path(tmp) / "tokenizer")
        choice = template_choice(params)  # the file's own template: Ollama's pick for it is compared too
        own = gguf if choice.family is None and choice.template is None else None
        with ollama_template(params.get("ollama_modelfile"), own):
            report, ctx = _verify_folder(folder, params, gguf.path)
        report = replace(report, source=str(gguf.path), tokenizer=str(gguf.path))
        if len(ctx.tokenizer) != len(gguf.tokens):
            extra = [ctx.tokenizer.convert_ids_to_tokens(i) for i in range(len(gguf.tokens), len(ctx.tokenizer))]
            notes.append(
                f"transformers' tokenizer for this file has {len(ctx.tokenizer)} ids, the file {len(gguf.tokens)}: "
                f"transformers adds {extra[:5]} (its default for tokenizer model {gguf.model!r})"
            )
        parity = llama_cpp_parity(gguf, ctx.tokenizer, ctx.probes)
        if params.get("html_out") is not None:
            write_html(params["html_out"], [(report, ctx)])
    against = params.get("against")
    comparison = compare_gguf(gguf, against) if against is not None else None
    _print(report, comparison, parity, notes, params.get("as_json", False), params.get("verbose", False), to_stderr)
    failed = not report.passes(params.get("fail_on", "error")) or not parity.ok
    sys.exit(1 if failed or (comparison is not None and not comparison.ok) else 0)


def _print(
    report: Any, comparison: Any, parity: Any, notes: list[str], as_json: bool, verbose: bool, to_stderr: bool = False
) -> None:
    from ..view.report import format_report

    echo = functools.partial(click.echo, err=to_stderr)  # standard output holds the --html - page

    if as_json:
        doc = report.to_dict()
        doc["gguf"] = {
            "against": comparison.to_dict() if comparison is not None else None,
            "llama_cpp_parity": parity.to_dict(),
            "notes": notes,
        }
        emit_json(doc)
        return
    echo(format_report(report, verbose=verbose))
    for note in notes:
        echo(f"note: {note}")
    echo(parity.describe())
    if parity.ran and parity.note:
        echo(f"note: {parity.note}")
    if comparison is not None:
        echo(comparison.describe())


_NOT_INTO_GGUF = {
    "tokenizer": "--tokenizer",
    "all_families": "--all",
    "training": "--training",
    "revision": "--revision",
    "token": "--token",
    "port": "--port",
}


def install_gguf(choice: TemplateChoice, params: dict[str, Any]) -> None:
    """`install --gguf IN.gguf --output OUT.gguf`: plan, then write the new GGUF file unless --dry-run (`params`:
    the command's other options)."""
    from ..errors import UsageError
    from ..families.registry import get_family
    from ..gguf.installing import apply_gguf_install, plan_gguf_install

    if ignored := [flag for name, flag in _NOT_INTO_GGUF.items() if params.get(name)]:
        raise UsageError(f"{', '.join(ignored)} cannot be used with --gguf", hint="drop " + ", ".join(ignored))
    if params.get("fmt", "both") != "both":
        raise UsageError("--format is for a tokenizer folder; a GGUF file has one template key", hint="drop --format")
    if isinstance(choice.family, str):  # an unknown family is named before the GGUF file is read
        choice = replace(choice, family=get_family(choice.family))
    plan = plan_gguf_install(
        choice,
        params["gguf_in"],
        params["output"],
        force=params.get("force", False),
        reuse_reserved=params.get("reuse_reserved", False),
        pad_token=params.get("pad_token"),
        bos_postprocessor=params.get("bos_postprocessor", True),
    )
    for warning in plan.warnings:
        warn(f"{plan.subject}: {warning}")
    as_json = params.get("as_json", False)
    if params.get("dry_run"):
        emit_json(plan.to_dict()) if as_json else click.echo(plan.describe())
        return
    result = apply_gguf_install(plan)
    if as_json:
        emit_json({**plan.to_dict(), "changed_keys": list(result.changed), "replaced": result.replaced})
        return
    click.echo(plan.describe())
    click.echo(f"written: {result.output} ({len(result.changed)} key(s) changed, everything else byte for byte)")
