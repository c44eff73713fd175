"""The package's version: its installed metadata (`importlib.metadata`), which pyproject.toml's `version` writes at
install time; in a source tree that was never installed, pyproject.toml itself."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

DISTRIBUTION = "hf-chat-templates"
UNKNOWN = "0+unknown"
SOURCE_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def package_version(pyproject: Path = SOURCE_PYPROJECT) -> str:
    """The installed distribution's version; without one, the `version` of `pyproject` (this source tree's
    pyproject.toml) when it is this project's; else UNKNOWN."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return UNKNOWN
    if project.get("name") != DISTRIBUTION or not isinstance(project.get("version"), str):
        return UNKNOWN
    return str(project["version"])
