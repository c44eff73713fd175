"""`install --port`: the template to install, ported before it is written. The porter is handed in
(`verification.port.port_for_install`, which the CLI passes): it returns the template with only the rewrites
proven on every probe conversation applied, and the lines the plan prints about what it changed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..tokenizer.vocab import token_content
from .subject import InstallSubject

# (template, the special-token strings it renders with) -> (the ported template, what the port did, line by line)
Porter = Callable[[str, dict[str, str]], tuple[str, tuple[str, ...]]]
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def port_subject(
    subject: InstallSubject, config: dict[str, Any], porter: Porter
) -> tuple[InstallSubject, tuple[str, ...]]:
    """`subject` with its default template ported by `porter`, rendered with the source config's special tokens,
    and the lines the plan prints; named templates (tool_use …) are installed as they are, which a line says."""
    variables = {name: text for name in SPECIAL_NAMES if (text := token_content(config.get(name)))}
    ported, lines = porter(subject.template, variables)
    others = sorted(name for name in subject.templates if name != "default")
    if others:
        lines = (*lines, f"named template(s) {', '.join(others)} installed as they are: port each with `port`")
    if ported == subject.template:
        return subject, lines
    written = {name: text for name, text in subject.written.items() if name != "default"}
    templates = {**subject.templates, "default": ported}
    return dataclasses.replace(subject, templates=templates, written=written), lines
