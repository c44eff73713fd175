"""Every exception the package raises on purpose.

    HfChatTemplatesError                      base; `.hint` says what to do next
    ├── UsageError(ValueError)                arguments that cannot work together
    │   └── UnknownNameError(LookupError)     unknown family, variant or base tokenizer
    ├── ConfigError(ValueError)               a model_configs family file is invalid (file, key)
    ├── TemplateError(ValueError)             a template does not parse (file, line)
    ├── TokenizerFolderError(OSError)         a tokenizer folder is missing, incomplete or corrupt
    ├── OutputExistsError(FileExistsError)    --output exists and is not empty, no --force
    ├── MissingDependencyError(ImportError)   an optional package is missing; names the extra
    ├── HubError(OSError)                     the Hub could not be reached or refused
    └── InstallCheckError(RuntimeError)       the written folder failed its reload self-check

The CLI maps every one of them to exit code 2 and prints the message and hint without a traceback
(set HF_CHAT_TEMPLATES_DEBUG=1 to see one). The builtin mix-ins keep `except ValueError` /
`except OSError` working for callers that do not know this package.
"""

from __future__ import annotations


class HfChatTemplatesError(Exception):
    """Base class. `str(err)` says what failed and where; `err.hint` says what to do next."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

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


class MissingDependencyError(HfChatTemplatesError, ImportError):
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
