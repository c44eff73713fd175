"""Every exception the package raises on purpose.

    HfChatTemplatesError                      base; `.hint` says what to do next
    ├── UsageError(ValueError)                arguments that cannot work together
    │   └── UnknownNameError(LookupError)     unknown family, variant or base tokenizer
    ├── ConfigError(ValueError)               a model_configs family file is invalid (file, key)
    ├── TemplateError(ValueError)             a template does not parse (file, line)
    ├── TokenizerFolderError(OSError)         a tokenizer folder is missing, incomplete or corrupt
    ├── OutputExistsError(FileExistsError)    the output exists and is not empty, and force is not set
    ├── OutputBusyError(OSError)              another process is writing the same output
    ├── MissingDependencyError(ImportError)   an optional package is missing; names the extra
    ├── HubError(OSError)                     the Hub could not be reached or refused
    └── InstallCheckError(RuntimeError)       the written folder failed its reload check

Errors carry data: `path` (the file or folder), `key` (a key in it), `line`, and `parameter` (the argument of the
library function that is wrong). A message or hint names an argument with `option(name)`: `str(err)` writes the
Python parameter name (`max_length`), and the CLI writes its option (`--max-length`) through `err.render(flag)`.
The mark `option` leaves cannot come from a user's text, so a path or value that spells `{force}` stays as it is.
The CLI maps every one of them to exit code 2 and prints the message and hint without a traceback
(HF_CHAT_TEMPLATES_DEBUG=1 adds one; the exit code stays). The builtin mix-ins keep `except ValueError` /
`except OSError` working for callers that do not know this package.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The arguments a message may name with `option(name)`.
PARAMETERS = frozenset(
    {
        "output",
        "check_every",
        "per_turn",
        "force",
        "tokenizer",
        "template",
        "family",
        "variant",
        "max_length",
        "kwargs",
        "format",
        "revision",
        "token",
        "messages",
        "conversations",
        "repo_id",
        "to_main",
        "skip_verify",
        "reuse_reserved",
        "pad_token",
        "diff_with",
        "only",
        "workers",
        "training",
        "private",
        "dry_run",
        "source",
        "max_skipped",
        "stop_tokens",
        "control_tokens",
        "allow_unwritten_tokens",
        "train_on",
        "allow_control_tokens_in_content",
        "pack",
        "input_format",
        "messages_column",
        "tools_column",
        "split",
        "fail_on",
        "sanitize",
        "engine",
        "ray_address",
        "num_cpus",
    }
)
# An argument's name between two unit separators: a control character no path, JSON value or template holds in a
# message by accident (user text is never trusted to mark one: see `render`).
_MARK = "\x1f"
_PLACEHOLDER = re.compile(_MARK + r"([a-z][a-z0-9_]*)" + _MARK)


def option(name: str) -> str:
    """How a message names the argument `name`: as `name` from Python, as `--name` on the command line."""
    if name not in PARAMETERS:
        raise ValueError(f"{name!r} is not a parameter errors may name; add it to errors.PARAMETERS")
    return f"{_MARK}{name}{_MARK}"


def _as_is(name: str) -> str:
    return name


class HfChatTemplatesError(Exception):
    """Base class. `str(err)` says what failed and where; `err.hint` says what to do next."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        path: str | os.PathLike[str] | None = None,
        key: str | None = None,
        line: int | None = None,
        parameter: str | None = None,
    ) -> None:
        super().__init__(message)
        self.template = message
        self.hint_template = hint
        self.path = Path(path) if path is not None else None
        self.key = key
        self.line = line
        self.parameter = parameter

    @staticmethod
    def render(text: str, flag: Callable[[str], str] = _as_is) -> str:
        """`text` with each argument named by `option(name)` written as `flag(name)`; any other mark removed."""
        text = _PLACEHOLDER.sub(lambda m: flag(m.group(1)) if m.group(1) in PARAMETERS else m.group(1), text)
        return text.replace(_MARK, "")

    @property
    def message(self) -> str:
        return self.render(self.template)

    @property
    def hint(self) -> str | None:
        return self.render(self.hint_template) if self.hint_template is not None else None

    def __str__(self) -> str:
        return self.message


class UsageError(HfChatTemplatesError, ValueError):
    """Arguments that cannot work together."""


class UnknownNameError(UsageError, LookupError):
    """An unknown family, variant or base tokenizer; the message lists what exists."""


class ConfigError(HfChatTemplatesError, ValueError):
    """A family configuration under model_configs/ is invalid."""


class TemplateError(HfChatTemplatesError, ValueError):
    """A chat template does not parse."""


class TokenizerFolderError(HfChatTemplatesError, OSError):
    """A tokenizer folder is missing, has no tokenizer, or holds a corrupt file."""


class OutputExistsError(HfChatTemplatesError, FileExistsError):
    """The output folder exists and is not empty."""


class OutputBusyError(HfChatTemplatesError, OSError):
    """Another process holds the output's lock: it is writing the same output now."""


class MissingDependencyError(HfChatTemplatesError, ImportError):  # type: ignore[misc]  # both define `path`
    """An optional dependency is not installed; the hint names the extra."""


class HubError(HfChatTemplatesError, OSError):
    """The Hugging Face Hub could not be reached, or refused the request."""


class InstallCheckError(HfChatTemplatesError, RuntimeError):
    """The installed folder did not reload as planned."""


def missing_dependency(package: str, extra: str, purpose: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"{purpose} needs the package {package!r}, which is not installed",
        hint=f"pip install 'hf-chat-templates[{extra}]'",
    )


def closest_hint(name: str, names: Any) -> str:
    """' (did you mean X?)' for the closest of `names`, or '' when none is close: lookups explain their misses."""
    match = difflib.get_close_matches(name, list(names), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""
