"""Families beyond the bundled ones: folders named by --families or HF_CHAT_TEMPLATES_FAMILIES, and folders other
packages ship through the `hf_chat_templates.families` entry-point group; the same family.toml schema, and a name
given twice is an error, never one family silently hiding another."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from hf_chat_templates import get_family, list_families
from hf_chat_templates.errors import ConfigError
from hf_chat_templates.families.registry import (
    ENTRY_POINT_GROUP,
    FAMILIES_ENV,
    _load_all,
    family_folders,
    family_roots,
)

from ..helpers import REPO_ROOT, run

BUNDLED = {"gemma3-tools", "gigachat3", "gpt-oss", "llama3.2-pythonic"}


def family_folder(root: Path, name: str, source: str = "llama3.2-pythonic") -> Path:
    """A copy of a bundled family under another name."""
    folder = root / name
    shutil.copytree(REPO_ROOT / "model_configs" / source, folder)
    config = folder / "family.toml"
    config.write_text(config.read_text().replace(f'name = "{source}"', f'name = "{name}"'))
    return root


@pytest.fixture(autouse=True)
def no_extra_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAMILIES_ENV, "")  # restored after each test
    _load_all.cache_clear()


def test_a_folder_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(FAMILIES_ENV, str(family_folder(tmp_path / "mine", "my-llama")))
    assert {f.name for f in list_families()} == BUNDLED | {"my-llama"}
    assert get_family("my-llama").variant().stop_tokens == ("<|eot_id|>",)


def test_the_cli_option(capsys: pytest.CaptureFixture[str], tmp_path: Path, toy_tokenizer: Path) -> None:
    root = family_folder(tmp_path / "mine", "my-llama")
    code, out, _ = run(capsys, "list", "--json", "--families", str(root))
    assert code == 0 and {f["name"] for f in json.loads(out)} == BUNDLED | {"my-llama"}
    code, out, err = run(
        capsys,
        "install",
        "my-llama",
        "--tokenizer",
        str(toy_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--families",
        str(root),
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["family"] == "my-llama" and (tmp_path / "out" / "chat_template.jinja").exists()


def test_the_cli_option_leaves_the_environment_and_the_registry_as_they_were(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = family_folder(tmp_path / "mine", "my-llama")
    before = dict(os.environ)
    code, out, _ = run(capsys, "list", "--json", "--families", str(root))
    assert code == 0 and "my-llama" in {f["name"] for f in json.loads(out)}
    assert dict(os.environ) == before  # the folders are the command's, not the process environment's
    assert "my-llama" not in {f.name for f in list_families()}  # and forgotten when the command ends
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0 and {f["name"] for f in json.loads(out)} == BUNDLED


def test_family_folders_come_before_the_environments_and_end_with_the_context(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env_root = family_folder(tmp_path / "env", "from-env")
    monkeypatch.setenv(FAMILIES_ENV, str(env_root))
    given = family_folder(tmp_path / "given", "given")
    with family_folders([given]) as added:
        assert added == (given,)
        roots = family_roots()
        assert roots.index(given.resolve()) < roots.index(env_root.resolve())
        assert {"given", "from-env"} <= {f.name for f in list_families()}
    assert given.resolve() not in family_roots() and "given" not in {f.name for f in list_families()}
    with pytest.raises(ConfigError, match="no such folder"), family_folders([tmp_path / "nowhere"]):
        list_families()
    assert tmp_path / "nowhere" not in family_roots()


def test_a_name_given_twice_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(FAMILIES_ENV, str(family_folder(tmp_path / "mine", "gigachat3")))
    with pytest.raises(ConfigError, match="two families are named 'gigachat3'") as err:
        list_families()
    assert err.value.key == "name" and err.value.path == tmp_path / "mine" / "gigachat3" / "family.toml"


def test_a_missing_folder_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "list", "--families", str(tmp_path / "nowhere"))
    assert code == 2 and "nowhere: no such folder" in err


def _plugin(site: Path, value: str, module: str = "") -> None:
    """An installed distribution (as importlib.metadata finds one on sys.path) with one entry point."""
    info = site / "myfams-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myfams\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nmine = {value}\n")
    if module:
        (site / "myfams.py").write_text(module)


def test_a_package_ships_families_through_an_entry_point(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = family_folder(tmp_path / "shipped", "plugin-llama")
    _plugin(tmp_path / "site", "myfams:FAMILIES", f"FAMILIES = {str(root)!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert get_family("plugin-llama").directory == root / "plugin-llama"
    sys.modules.pop("myfams", None)


def test_a_broken_entry_point_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _plugin(tmp_path / "site", "no_such_module:FAMILIES")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"the entry point 'mine' .* does not load"):
        list_families()
