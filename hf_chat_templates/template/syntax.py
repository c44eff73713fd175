"""Parsing chat templates the way transformers compiles them, without importing transformers.

transformers compiles templates in an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the
loopcontrols extension and its own `{% generation %}` tag. Parsing with the same settings here lets the registry
and `install` reject a template that transformers would reject, before anything is written. Template files are
read as transformers reads `chat_template.jinja` (`read_template`: CRLF becomes LF), so a template renders and
verifies the same whether it comes as `--template FILE` or inside a folder.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .. import _compat
from ..errors import TemplateError

# `{% generation %}` / `{% endgeneration %}`, with any whitespace control: what transformers' tracker reads.
GENERATION_TAG = re.compile(r"\{%-?\+?\s*(?:end)?generation\s*[-+]?%\}")


@lru_cache(maxsize=1)
def parse_environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_compat.generation_tag(), jinja2.ext.loopcontrols]
    )


@lru_cache(maxsize=1)
def parser_fingerprint() -> str:
    """What a template's parse depends on besides its text: jinja2's version, this module's code (the
    environment's settings) and _compat's (the `generation` tag), for a record of a text that parsed."""
    code = Path(__file__).read_bytes() + Path(_compat.__file__).read_bytes()
    return hashlib.sha256(f"jinja2 {jinja2.__version__}\n".encode() + code).hexdigest()


def check_template_syntax(source: str, origin: str | Path) -> None:
    """Raise TemplateError naming `origin` and the line when `source` does not parse as a chat template."""
    try:
        parse_environment().parse(source)
    except jinja2.TemplateSyntaxError as err:
        raise TemplateError(
            f"{origin}, line {err.lineno}: the chat template does not parse: {err.message}",
            hint="fix the Jinja syntax at that line; templates are parsed with trim_blocks and lstrip_blocks "
            "as transformers does",
            path=str(origin),
            line=err.lineno,
        ) from None


def transformers_text(text: str) -> str:
    """A template's text as transformers reads it from a `.jinja` file.

    transformers opens `chat_template.jinja` and `additional_chat_templates/*.jinja` in text mode
    (`open(path, encoding="utf-8").read()`), whose universal newlines turn CRLF and a lone CR into LF. Jinja's lexer
    does the same to any template source (a `chat_template` key with "\\r\\n" included), so this never changes
    what transformers renders; minijinja, the engine of TGI, keeps carriage returns as they are.

    >>> transformers_text("a\\r\\nb\\rc\\n")
    'a\\nb\\nc\\n'
    """
    return text.replace("\r\n", "\n").replace("\r", "\n")


def line_endings(text: str) -> str:
    """The line endings of `text`: "LF" (also for none), "CRLF", "CR", or "mixed"."""
    crlf = text.count("\r\n")
    cr, lf = text.count("\r") - crlf, text.count("\n") - crlf
    kinds = [name for name, n in (("CRLF", crlf), ("CR", cr), ("LF", lf)) if n]
    return kinds[0] if len(kinds) == 1 else "mixed" if kinds else "LF"


# A named template becomes the file additional_chat_templates/NAME.jinja: one path component of safe characters.
TEMPLATE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
BOM = "\ufeff"


def template_name_problem(name: str) -> str | None:
    """Why `name` cannot name a template (it becomes a file name), or None when it can."""
    if not name:
        return "the name is empty"
    if TEMPLATE_NAME.fullmatch(name) is None or ".." in name:
        return (
            f"the name {name!r} is not one file name of letters, digits, '_', '.' and '-' "
            "(up to 64, not starting with '.' or '-', no '..')"
        )
    return None


@dataclass(frozen=True)
class TemplateFile:
    """A template file: `written` as the file holds it, `text` as transformers reads it (they differ only in line
    endings). A UTF-8 byte order mark is removed from both (`had_bom`): transformers reads a .jinja file with
    `encoding="utf-8"`, which keeps it, so every rendering would start with U+FEFF, a character no template means
    to write."""

    path: Path
    written: str
    had_bom: bool = False

    @property
    def text(self) -> str:
        return transformers_text(self.written)


# The largest template read from a file: published templates are under 100 kB; a device or a runaway file is not one.
MAX_TEMPLATE_BYTES = 16 << 20


def unreachable_link(path: Path) -> str | None:
    """What is wrong with `path` when it is a symbolic link that reaches no file (a loop, or a missing target)."""
    if not path.is_symlink():
        return None
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 raises it for a loop
        return f"{path}: a symbolic link that loops (it never reaches a file)"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{path}: a symbolic link that loops (it never reaches a file)"
        return f"{path}: a symbolic link whose target does not exist ({os.readlink(path)})"
    return None


def read_input(path: Path, limit: int, what: str, error: type[Exception] = TemplateError) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them, or `error` naming the path: a folder, a
    device (/dev/zero), a FIFO or a file over the limit is refused before it is read whole."""
    if broken := unreachable_link(path):
        raise error(broken, hint=f"point the link at a {what}, or give the file itself", path=path)  # type: ignore[call-arg]
    if path.is_dir():
        raise error(f"{path}: is a folder, not a {what}", hint=f"give a {what}", path=path)  # type: ignore[call-arg]
    if path.exists() and not path.is_file():
        raise error(  # type: ignore[call-arg]
            f"{path}: is not a regular file (a device, FIFO or socket)", hint=f"give a {what} (a copy of it)", path=path
        )
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found", hint="check the path", path=path) from None  # type: ignore[call-arg]
    except OSError as err:
        raise error(  # type: ignore[call-arg]
            f"{path}: cannot read it ({err.strerror or err})", hint="check the file's permissions", path=path
        ) from None
    if len(data) > limit:
        raise error(  # type: ignore[call-arg]
            f"{path}: larger than {limit >> 20} MB, more than a {what} can be", hint=f"give a {what}", path=path
        )
    return data


def read_template(path: Path) -> TemplateFile:
    """Read a template file as UTF-8, or raise TemplateError. Its `text` is what transformers reads once the file
    is installed as `chat_template.jinja`, whatever its line endings."""
    data = read_input(path, MAX_TEMPLATE_BYTES, "template file")
    try:
        text = data.decode("utf-8")
        return TemplateFile(path, text.removeprefix(BOM), had_bom=text.startswith(BOM))
    except UnicodeDecodeError as err:
        raise TemplateError(
            f"{path}: the template is not UTF-8 (byte {err.start} is {data[err.start]:#04x})",
            hint="save the template as UTF-8",
            path=path,
        ) from None


def read_template_file(path: Path) -> str:
    """Read a family's template file exactly, or raise TemplateError. A family's template is kept byte for byte
    and identified by the sha256 of its bytes, so it must be what transformers reads: LF line endings only."""
    text = read_template(path).written
    if "\r" in text:
        line = text.count("\n", 0, text.index("\r")) + 1
        raise TemplateError(
            f"{path}, line {line}: the template contains a carriage return; a family's template is kept byte for "
            "byte, and transformers reads chat_template.jinja with newline translation, so the two would differ",
            hint="convert the file to LF line endings",
            path=path,
            line=line,
        )
    return text


def has_generation_markers(template: str) -> bool:
    return GENERATION_TAG.search(template) is not None


@lru_cache(maxsize=64)
def template_literals(template: str) -> str:
    """Every string literal and raw text of the template, joined: where control tokens are written."""
    ast = parse_environment().parse(template)
    parts = [node.value for node in ast.find_all(jinja2.nodes.Const) if isinstance(node.value, str)]
    parts += [node.data for node in ast.find_all(jinja2.nodes.TemplateData)]
    return "\n".join(parts)
