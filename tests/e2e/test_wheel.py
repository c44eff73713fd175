"""The wheel ships every family inside the package, and the package finds them there."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from hf_chat_templates import list_families

from ..helpers import REPO_ROOT


def test_wheel_ships_every_family(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("hf_chat_templates-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for family in list_families():
        for variant in family.variants.values():
            assert f"hf_chat_templates/model_configs/{family.name}/{variant.template_path.name}" in names
        assert f"hf_chat_templates/model_configs/{family.name}/family.toml" in names
    assert "hf_chat_templates/py.typed" in names
    # Unpacked on its own, away from the checkout, the package loads its families from inside itself.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import hf_chat_templates as h, hf_chat_templates.families.registry as r;"
        "print(r.default_config_root()); print(len(h.list_families()))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {code}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    root, count = result.stdout.split()
    assert root == str(site / "hf_chat_templates" / "model_configs")
    assert int(count) == len(list_families())
