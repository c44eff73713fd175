"""The `hf-chat-templates` command: parse arguments, call the library, format, pick the exit code.

Each module holds the commands of one stage (`catalog`, `installing`, `checking`, `training`, `viewing`,
`publishing`) on the group in `app`; `main` runs them. Nothing in the library imports this package.
"""

from .main import main

__all__ = ["main"]
