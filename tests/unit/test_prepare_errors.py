"""`prepare` on a broken folder or a template that does not render: a clear error naming the file or the template's
failure, exit 2, never "unexpected … report it", never a stop-token hint for a rendering failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..helpers import CONVERSATIONS, run, write_jsonl


def test_a_corrupt_config_is_named(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (chatml / "tokenizer_config.json").write_text("{broken", encoding="utf-8")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0])])
    code, _, err = run(capsys, "prepare", str(chatml), "--conversations", str(data), "--output", str(tmp_path / "o"))
    assert code == 2 and "tokenizer_config.json, line 1, column 2: invalid JSON" in err
    assert "unexpected" not in err and not (tmp_path / "o").exists()


def test_a_template_that_does_not_render_is_not_a_missing_stop(
    chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{{ raise_exception('no') }}{% endfor %}")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0])])
    code, _, err = run(
        capsys,
        *("prepare", str(chatml), "--template", str(template)),
        *("--conversations", str(data), "--output", str(tmp_path / "o")),
    )
    assert code == 2 and "the template file: a plain two-exchange conversation does not render" in err
    assert "--stop-token" not in err and "verify SRC --template FILE" in err
