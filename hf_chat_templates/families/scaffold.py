"""`family init`: a family folder for a template of your own, for you to review and keep.

It writes `OUTPUT/NAME/family.toml` and the template beside it, with the control and stop tokens (declared, or
inferred from the template's renderings on the tokenizer, and said so in a comment), the keywords the template
reads, whether it writes BOS, and its provenance (file and sha256). The folder loads with the same validation as a
bundled family, and `--families OUTPUT` puts it beside them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError, option
from ..outputs import staged_folder
from ..template.analysis import template_kwargs, writes_bos
from ..template.syntax import check_template_syntax, read_template_file
from ..tokenizer.folder import read_folder
from ..tokenizer.hub import resolve_source
from .registry import CONFIG_FILE, Family, load_family
from .tokens import template_tokens

TEMPLATE_FILE = "template.jinja"


def _toml(value: Any) -> str:
    """A TOML value: JSON's string escapes and arrays are valid TOML basic strings and arrays."""
    return json.dumps(value, ensure_ascii=False)


def _config_text(name: str, source: Path, text: str, tokenizer: str, tokens: Any) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    lines = [
        f"# Written by hf-chat-templates family init from {source.name} on {tokenizer}.",
        f"# Tokens: {tokens.origin}. Review them: they are what install registers and where training stops.",
        f"name = {_toml(name)}",
        f"description = {_toml(f'{name}: from {source.name}')}",
        'default_variant = "main"',
        "# The offline tokenizer `verify --all` installs it on (llama3, o200k-harmony or mistral-v3-sp).",
        'base_tokenizer = "llama3"',
        f"template_writes_bos = {'true' if writes_bos(text) else 'false'}",
        "",
        "[variants.main]",
        f"template = {_toml(TEMPLATE_FILE)}",
        f"description = {_toml(f'{source.name}, byte for byte')}",
        f"control_tokens = {_toml(list(tokens.control_tokens))}",
        f"stop_tokens = {_toml(list(tokens.stop_tokens))}",
    ]
    for kwarg in template_kwargs(text):
        lines += [
            "",
            f"[variants.main.kwargs.{kwarg}]",
            'doc = "read by the template; give it a default here if training should pin it"',
        ]
    lines += ["", "[variants.main.provenance]", f"origin = {_toml(str(source))}", f"sha256 = {_toml(digest)}"]
    return "\n".join(lines) + "\n"


def init_family(
    name: str,
    template: str | Path,
    tokenizer: str | Path,
    output: str | Path,
    *,
    stop_tokens: Iterable[str] | None = None,
    control_tokens: Iterable[str] | None = None,
    force: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> Family:
    """Write the family folder `output/name` for the template file `template`, its tokens inferred on `tokenizer`
    unless declared; returns the family as the registry loads it."""
    from transformers import AutoTokenizer

    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"{name!r} cannot name a family folder", hint="use letters, digits, '.', '-' and '_'")
    path = Path(template)
    text = read_template_file(path)
    check_template_syntax(text, path)
    source = resolve_source(tokenizer, revision=revision, token=token)
    loaded = AutoTokenizer.from_pretrained(str(source))
    found = template_tokens(
        loaded,
        text,
        stop_tokens=stop_tokens,
        control_tokens=control_tokens,
        generation_config=read_folder(source).generation_config,
    )
    if not found.stop_tokens:
        raise UsageError(
            f"{path}: " + ("; ".join(found.notes) if found.notes else "no token is known to end an assistant turn"),
            parameter="stop_tokens",
            hint=f"declare it: {option('stop_tokens')} TOKEN",
            path=path,
        )
    folder = Path(output) / name
    with staged_folder(folder, force=force) as staging:
        (staging.path / TEMPLATE_FILE).write_bytes(path.read_bytes())
        (staging.path / CONFIG_FILE).write_text(_config_text(name, path, text, str(tokenizer), found), encoding="utf-8")
    return load_family(folder)  # the registry's own validation of what was written
