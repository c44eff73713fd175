"""Hostile files (the cases listed in tests/hostile/INPUTS.md): a GGUF file with a large array or a named template
whose name is a path, a device or a runaway file given as a template, and a template that spends its render budget.
Memory stays bounded by the input; each is a named error or a finding of the template, never "report this"."""

from __future__ import annotations

import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from hf_chat_templates.gguf import GgufFileError, read_gguf
from hf_chat_templates.gguf.arrays import LazyArray
from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.reading import read_layout
from hf_chat_templates.gguf.writing import GgufValue, encode_entry
from hf_chat_templates.outputs import STAGING_MARK
from hf_chat_templates.template import limits
from hf_chat_templates.verification import runner
from hf_chat_templates.verification.results import CheckResult

from ..helpers import chatml_folder, context, run

STRING, ARRAY, UINT32 = 8, 9, 4
PLAIN_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def toy_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gguf")
    return export_vocab_gguf(chatml_folder(root / "tok"), root / "toy.gguf", pre="gpt-2")


def with_entries(src: Path, out: Path, extra: bytes, count: int) -> Path:
    """`src` (no tensors) with `count` more key/values, given encoded."""
    layout = read_layout(src)
    raw = src.read_bytes()
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, len(layout.entries) + count) + raw[24 : layout.tensor_info[0]] + extra
    out.write_bytes(header + b"\0" * (-len(header) % 32))
    return out


def big_array(key: str, n: int) -> bytes:
    name = key.encode()
    return struct.pack("<Q", len(name)) + name + struct.pack("<IIQ", ARRAY, UINT32, n) + bytes(4 * n)


def test_a_large_array_costs_its_bytes_not_python_objects(toy_gguf: Path, tmp_path: Path) -> None:
    n = 2_000_000
    path = with_entries(toy_gguf, tmp_path / "big.gguf", big_array("general.big", n), 1)
    tracemalloc.start()
    layout = read_layout(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    value = layout.get("general.big")
    assert isinstance(value, LazyArray) and len(value) == n and value[0] == 0 and value[-1] == 0
    assert peak < 3 * 4 * n  # a tuple of n ints would be about 36 bytes each
    gguf = read_gguf(path)
    assert gguf.tokens[0] == read_gguf(toy_gguf).tokens[0] and list(gguf.tokens) == list(read_gguf(toy_gguf).tokens)


def test_arrays_compare_with_sequences(toy_gguf: Path) -> None:
    tokens = read_gguf(toy_gguf).tokens
    assert tokens == list(tokens) and tokens == tuple(tokens) and tokens[:2] == list(tokens)[:2]
    assert tokens != [*tokens, "extra"]


def test_a_named_template_whose_name_is_a_path_is_refused(
    toy_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = with_entries(
        toy_gguf,
        tmp_path / "bad.gguf",
        encode_entry("<", "tokenizer.chat_template.../x", GgufValue(STRING, None, "x")),
        1,
    )
    with pytest.raises(GgufFileError, match="is not one file name"):
        read_gguf(path)
    code, _, err = run(capsys, "verify", str(path))
    assert code == 2 and "tokenizer.chat_template.'../x'" in err and "unexpected" not in err


def test_diff_refuses_devices_fifos_and_runaway_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hf_chat_templates.template.syntax as syntax

    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    code, _, err = run(capsys, "diff", str(template), "/dev/zero")
    assert code == 2 and "/dev/zero: is not a regular file" in err
    monkeypatch.setattr(syntax, "MAX_TEMPLATE_BYTES", 1000)
    (tmp_path / "big.jinja").write_text("x" * 2000)
    code, _, err = run(capsys, "diff", str(template), str(tmp_path / "big.jinja"))
    assert code == 2 and "larger than" in err


def test_a_check_stopped_by_the_template_budget_blames_the_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context(chatml_folder(tmp_path / "tok"))

    def spent(ctx: object) -> CheckResult:
        raise limits.RenderLimitExceeded("the renderings of this template add up to 24,000,713 characters")

    monkeypatch.setattr(runner, "CHECKS", (("renders", spent),))
    (result,) = runner.run_checks(ctx, ["renders"])
    assert result.status == "fail" and result.cause == "template"
    assert "render budget for this run is spent" in result.message and "report" not in (result.hint or "")
    assert "HF_CHAT_TEMPLATES_RENDER_MAX_CHARS" in (result.hint or "")


def test_a_killed_gguf_installs_staging_file_is_swept(
    toy_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".new.gguf{STAGING_MARK}{int(gone.stdout)}-x1y2"
    stale.write_bytes(b"GGUF half a file")
    template = tmp_path / "t.jinja"
    template.write_text(PLAIN_CHATML)
    code, _, err = run(
        capsys, "install", "--template", str(template), "--gguf", str(toy_gguf), "--output", str(tmp_path / "new.gguf")
    )
    assert code == 0, err
    assert not stale.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["new.gguf", "t.jinja"]


def test_view_refuses_a_rendering_it_cannot_draw_within_the_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hf_chat_templates.view.conversation as conversation

    monkeypatch.setattr(conversation, "MAX_VIEW_CHARS", 1000)
    folder = chatml_folder(tmp_path / "tok")
    template = tmp_path / "t.jinja"
    template.write_text("{{- 'x' * 5000 -}}" + PLAIN_CHATML)
    messages = tmp_path / "m.json"
    messages.write_text('[{"role": "user", "content": "hi"}]')
    code, _, err = run(capsys, "view", str(folder), "--messages", str(messages), "--template", str(template))
    assert code == 2 and "renders 5,0" in err and "view shows renderings of up to 1,000" in err


def test_a_key_given_twice_or_of_the_wrong_type_is_named(toy_gguf: Path, tmp_path: Path) -> None:
    twice = encode_entry("<", "tokenizer.ggml.eos_token_id", GgufValue(10, None, 2**63))
    with pytest.raises(GgufFileError, match=r"'tokenizer\.ggml\.eos_token_id' is given twice"):
        read_gguf(with_entries(toy_gguf, tmp_path / "twice.gguf", twice, 1))
    names = encode_entry("<", "tokenizer.chat_templates", GgufValue(ARRAY, UINT32, (1, 2)))
    with pytest.raises(GgufFileError, match="is an array of numbers, not a list of template names"):
        read_gguf(with_entries(toy_gguf, tmp_path / "names.gguf", names, 1))


def test_a_symlink_loop_as_messages_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    code, _, err = run(capsys, "view", str(chatml_folder(tmp_path / "tok")), "--messages", str(tmp_path / "a"))
    assert code == 2 and "a symbolic link that loops" in err and "unexpected" not in err


def test_a_link_that_reaches_no_file_is_named_as_one_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symbolic link that loops or points nowhere is named as such: never "not found", never read as a Hub id."""
    tok = chatml_folder(tmp_path / "tok")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    for link, said in (("a", "a symbolic link that loops"), ("gone", "whose target does not exist")):
        path = str(tmp_path / link)
        for argv in (
            ("diff", path, str(tok)),
            ("verify", str(tok), "--conversations", path),
            ("verify", str(tok), "--template", path),
            ("verify", path),
        ):
            code, _, err = run(capsys, *argv)
            assert code == 2 and said in err and "point the link at" in err, (argv, err)
            assert "Hub" not in err.splitlines()[0] and "unexpected" not in err
