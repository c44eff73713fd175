"""The public API is `hf_chat_templates.__all__`: everything in it is importable and documented, nothing else is
public at the top level, the set is pinned, and the stage modules a user imports stay modules."""

from __future__ import annotations
import __future__

import importlib
import importlib.metadata
import inspect
import tomllib
import types
from pathlib import Path

import pytest

import hf_chat_templates

# The same set as tests/unit/test_public_surface.py; a change to the public surface is deliberate and changes both.
EXPECTED = {
    "CheckResult",
    "Family",
    "HfChatTemplatesError",
    "InstallPlan",
    "InstallResult",
    "PushPlan",
    "PushResult",
    "TemplateChoice",
    "TrainingFeatures",
    "VerificationReport",
    "Variant",
    "apply_install",
    "base_tokenizer",
    "derive_training_template",
    "get_family",
    "install",
    "list_families",
    "plan_install",
    "plan_push",
    "prepare",
    "push",
    "read_folder",
    "verify",
    "verify_all",
}

# Module paths a user might import; each must be a module, not a function the package exports under that name.
STAGE_MODULES = (
    "hf_chat_templates.installation.apply",
    "hf_chat_templates.verification.runner",
    "hf_chat_templates.publish.hub",
    "hf_chat_templates.training.dataset",
)


def test_all_is_pinned() -> None:
    assert len(hf_chat_templates.__all__) == len(set(hf_chat_templates.__all__))  # no name listed twice
    assert set(hf_chat_templates.__all__) == EXPECTED


@pytest.mark.parametrize("name", sorted(hf_chat_templates.__all__))
def test_every_exported_name_imports_and_is_documented(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from hf_chat_templates import {name}", namespace)  # the way a user imports it
    value = namespace[name]
    assert value is getattr(hf_chat_templates, name)
    assert not isinstance(value, types.ModuleType), f"{name} is a module"
    if inspect.isfunction(value) or inspect.isclass(value):
        doc = inspect.getdoc(value)
        assert doc and doc.strip(), f"{name} has no docstring"
        if inspect.isclass(value):
            assert value.__doc__, f"{name} has no docstring of its own"  # not only an inherited one


def _public_attributes() -> set[str]:
    """Top-level names not starting with `_`, without submodules and `from __future__` features (compiler
    directives that `from __future__ import annotations` binds as a name, not an export)."""
    return {
        name
        for name, value in vars(hf_chat_templates).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)
    }


def test_public_attributes_are_exactly_all() -> None:
    assert _public_attributes() == set(hf_chat_templates.__all__)


def test_star_import_gives_all() -> None:
    namespace: dict[str, object] = {}
    exec("from hf_chat_templates import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(hf_chat_templates.__all__)


@pytest.mark.parametrize("path", STAGE_MODULES)
def test_stage_module_paths_give_modules(path: str) -> None:
    module = importlib.import_module(path)
    assert isinstance(module, types.ModuleType)
    assert module.__name__ == path
    # `import a.b.c` then `a.b.c` must reach the module too, not a function bound over it in `a.b`
    parent, _, leaf = path.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is module


def test_errors_keep_builtin_meaning() -> None:
    from hf_chat_templates import errors

    assert issubclass(errors.UnknownNameError, LookupError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.TokenizerFolderError, OSError)
    assert issubclass(errors.OutputExistsError, FileExistsError)
    assert issubclass(errors.MissingDependencyError, ImportError)
    err = errors.TokenizerFolderError("x: broken", hint="do y")
    assert str(err) == "x: broken" and err.hint == "do y"


# ---- __version__: from the package's metadata, which pyproject.toml writes ------------------------------------


PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_version_is_pyprojects() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    assert hf_chat_templates.__version__ == project["version"]
    assert importlib.metadata.version("hf-chat-templates") == project["version"]


def test_a_source_tree_without_metadata_reads_pyproject(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from hf_chat_templates import _version

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert _version.package_version() == tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "something-else"\nversion = "9.9"\n')
    assert _version.package_version(other) == _version.UNKNOWN
    assert _version.package_version(tmp_path / "missing.toml") == _version.UNKNOWN
    other.write_text("[project\n")
    assert _version.package_version(other) == _version.UNKNOWN
