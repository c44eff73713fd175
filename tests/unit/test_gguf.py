"""GGUF files on the toy tokenizer: reading, corrupt files, writing byte for byte, and the comparison with a folder."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from hf_chat_templates.errors import HfChatTemplatesError, OutputExistsError, UsageError
from hf_chat_templates.gguf import GgufFileError, read_gguf
from hf_chat_templates.gguf.comparing import compare_gguf
from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.reading import CONTROL, NORMAL, read_layout
from hf_chat_templates.gguf.writing import write_gguf
from tests.helpers import CONTROL as CHATML_CONTROL
from tests.helpers import GOOD, chatml_folder, run

PLAIN_CHATML = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
TENSORS = (("token_embd.weight", (8, 4)), ("output_norm.weight", (16,)))


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the ChatML toy folder, its vocabulary-only GGUF file)."""
    root = tmp_path_factory.mktemp("gguf")
    folder = chatml_folder(root / "tok")
    return folder, export_vocab_gguf(folder, root / "toy.gguf", pre="gpt-2")


def with_tensors(src: Path, out: Path) -> Path:
    """`src` with two F32 tensors of random bytes, laid out as GGUF stores them (32-byte aligned)."""
    layout = read_layout(src)
    raw = src.read_bytes()
    infos, offset, data = b"", 0, b""
    for name, dims in TENSORS:
        size = 4 * int.__mul__(*dims) if len(dims) == 2 else 4 * dims[0]
        encoded = name.encode()
        infos += struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", len(dims))
        infos += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", 0, offset)
        data += os.urandom(size) + b"\0" * (-size % 32)
        offset += size + (-size % 32)
    header = b"GGUF" + struct.pack("<IQQ", 3, len(TENSORS), len(layout.entries)) + raw[24 : layout.tensor_info[0]]
    header += infos
    out.write_bytes(header + b"\0" * (-len(header) % 32) + data)
    return out


def test_reads_the_tokenizer_and_template(toy: tuple[Path, Path]) -> None:
    folder, path = toy
    gguf = read_gguf(path)
    vocab = json.loads((folder / "tokenizer.json").read_text())
    assert gguf.chat_template == GOOD and gguf.model == "gpt2" and gguf.pre == "gpt-2"
    assert gguf.architecture == "llama" and gguf.path == path
    stop = next(e["id"] for e in vocab["added_tokens"] if e["content"] == "<|im_end|>")
    assert (gguf.bos_token_id, gguf.eos_token_id, gguf.eot_token_id) == (1, 2, stop)
    assert gguf.add_bos_token is False and gguf.stop_token_ids == (2, stop)
    assert set(CHATML_CONTROL) <= set(gguf.control_tokens)
    assert gguf.token_type(5) == "CONTROL" and gguf.token_types[gguf.tokens.index("Ġthe")] == NORMAL


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", "empty"),
        (b"PK\x03\x04 not a gguf", "not a GGUF file"),
        (b"GGUF" + struct.pack("<I", 1) + b"\0" * 16, "version 1 is not supported"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 5), "runs past the end of the file"),
    ],
)
def test_files_that_are_not_gguf_get_a_clear_error(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GgufFileError, match=expected) as info:
        read_gguf(path)
    assert info.value.path == path and info.value.hint


def test_every_truncation_is_a_clear_error(toy: tuple[Path, Path], tmp_path: Path) -> None:
    raw = toy[1].read_bytes()
    layout = read_layout(toy[1])
    for cut in (10, 30, layout.entries[3].start + 9, layout.entries[5].end - 3, layout.tensor_info[0] - 1):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(raw[:cut])
        with pytest.raises(GgufFileError, match=r"at byte \d+; the file is truncated or corrupt"):
            read_gguf(path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(GgufFileError, match="no such file"):
        read_gguf(tmp_path / "nope.gguf")


def _entries(path: Path) -> dict[str, bytes]:
    layout = read_layout(path)
    raw = path.read_bytes()
    return {e.key: raw[e.start : e.end] for e in layout.entries}


def _tensor_part(path: Path) -> tuple[bytes, str]:
    layout = read_layout(path)
    raw = path.read_bytes()
    start, end = layout.tensor_info
    return raw[start:end], hashlib.sha256(raw[layout.data_offset :]).hexdigest()


def test_write_changes_only_the_keys_asked_and_copies_the_tensors(toy: tuple[Path, Path], tmp_path: Path) -> None:
    src = with_tensors(toy[1], tmp_path / "model.gguf")
    before = src.read_bytes()
    stop = read_gguf(src).eot_token_id
    result = write_gguf(src, tmp_path / "new.gguf", chat_template="{{ messages }}", token_ids={"eos": stop})
    assert src.read_bytes() == before  # the input is never written
    assert result.changed == ("tokenizer.ggml.eos_token_id", "tokenizer.chat_template")
    old, new = _entries(src), _entries(result.output)
    assert list(old) == list(new)
    assert {k for k in old if old[k] != new[k]} == set(result.changed)
    assert _tensor_part(src) == _tensor_part(result.output)
    assert read_gguf(result.output).chat_template == "{{ messages }}" and read_gguf(result.output).eos_token_id == stop


def test_the_real_reader_reads_the_written_file(toy: tuple[Path, Path], tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    src = with_tensors(toy[1], tmp_path / "model.gguf")
    out = write_gguf(src, tmp_path / "new.gguf", chat_template="x" * 1000, control_token_ids=[7]).output
    old, new = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(out))
    assert [t.name for t in new.tensors] == [name for name, _ in TENSORS]
    # bytes, not values: random bytes read as float32 hold NaNs, which compare unequal to themselves
    assert all(a.data.tobytes() == b.data.tobytes() for a, b in zip(old.tensors, new.tensors))
    assert new.fields["tokenizer.chat_template"].contents() == "x" * 1000
    assert new.fields["tokenizer.ggml.token_type"].contents()[7] == CONTROL


def test_new_keys_are_added_after_the_others(toy: tuple[Path, Path], tmp_path: Path) -> None:
    result = write_gguf(toy[1], tmp_path / "named.gguf", named_templates={"tool_use": "{{ tools }}"})
    assert result.changed == ("tokenizer.chat_templates", "tokenizer.chat_template.tool_use")
    assert read_gguf(result.output).named_templates == {"tool_use": "{{ tools }}"}
    assert list(_entries(result.output))[: len(_entries(toy[1]))] == list(_entries(toy[1]))


def test_never_in_place_unless_asked_and_no_overwrite_without_force(toy: tuple[Path, Path], tmp_path: Path) -> None:
    src = tmp_path / "copy.gguf"
    src.write_bytes(toy[1].read_bytes())
    with pytest.raises(UsageError, match="the output is the input file"):
        write_gguf(src, src, chat_template="x")
    assert src.read_bytes() == toy[1].read_bytes()
    other = tmp_path / "other.gguf"
    other.write_bytes(b"keep")
    with pytest.raises(OutputExistsError, match="exists"):
        write_gguf(src, other, chat_template="x")
    assert other.read_bytes() == b"keep"
    assert write_gguf(src, other, chat_template="x", force=True).replaced
    assert write_gguf(src, src, chat_template="y", in_place=True).replaced and read_gguf(src).chat_template == "y"
    assert not [p for p in tmp_path.iterdir() if ".hfct-staging-" in p.name]


def test_a_token_outside_the_vocabulary_is_refused(toy: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="outside the vocabulary") as info:
        write_gguf(toy[1], tmp_path / "x.gguf", control_token_ids=[10**6])
    assert "embeddings" in (info.value.hint or "")


def test_the_gguf_of_a_folder_compares_equal_to_it(toy: tuple[Path, Path]) -> None:
    comparison = compare_gguf(toy[1], toy[0])
    assert comparison.ok, comparison.describe()
    assert comparison.notes == ()


def test_a_changed_template_is_named_with_where_it_differs(toy: tuple[Path, Path], tmp_path: Path) -> None:
    changed = write_gguf(toy[1], tmp_path / "t.gguf", chat_template=GOOD.replace("'\\n'", "'\\n\\n'", 1)).output
    (difference,) = compare_gguf(changed, toy[0]).differences
    assert difference.what == "chat template 'default' (tokenizer.chat_template)"
    assert "first difference at character" in difference.gguf and "install" in difference.fix


def test_a_different_eos_and_a_control_token_that_is_not_control_are_named(
    toy: tuple[Path, Path], tmp_path: Path
) -> None:
    gguf = read_gguf(toy[1])
    stop = gguf.eot_token_id
    layout_types = list(gguf.token_types)
    layout_types[stop] = NORMAL
    out = tmp_path / "e.gguf"
    write_gguf(toy[1], out, token_ids={"eos": 3, "eot": 3})
    whats = {d.what: d for d in compare_gguf(out, toy[0]).differences}
    assert "eos id (tokenizer.ggml.eos_token_id)" in whats
    assert f"stop id {stop} ('<|im_end|>')" in whats and "eot_token_id" in whats[f"stop id {stop} ('<|im_end|>')"].fix
    assert "stop id 3 ('<|reserved_special_token_0|>')" in whats  # llama.cpp would stop where the model does not


def test_a_special_token_typed_normal_is_named(toy: tuple[Path, Path], tmp_path: Path) -> None:
    from hf_chat_templates.gguf.writing import INT32, GgufValue, encode_entry

    gguf = read_gguf(toy[1])
    stop = gguf.eot_token_id
    types = list(gguf.token_types)
    types[stop] = NORMAL
    layout = read_layout(toy[1])
    raw = bytearray(toy[1].read_bytes())
    entry = next(e for e in layout.entries if e.key == "tokenizer.ggml.token_type")
    encoded = encode_entry("<", entry.key, GgufValue(9, INT32, tuple(types)))
    out = tmp_path / "n.gguf"
    out.write_bytes(bytes(raw[: entry.start]) + encoded + bytes(raw[entry.end :]))
    (difference,) = compare_gguf(out, toy[0]).differences
    assert difference.what == f"special token '<|im_end|>' (id {stop})"
    assert "type NORMAL" in difference.gguf and "CONTROL" in difference.fix


def test_add_bos_that_disagrees_is_named(toy: tuple[Path, Path], tmp_path: Path) -> None:
    out = write_gguf(toy[1], tmp_path / "b.gguf", add_bos_token=True).output
    (difference,) = compare_gguf(out, toy[0]).differences
    assert difference.what == "add BOS (tokenizer.ggml.add_bos_token)" and difference.gguf == "true"


def test_cli_verify_against_passes_and_fails(toy: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    only = "renders,control-tokens-atomic,stop-token-registered"
    code, out, err = run(capsys, "verify", str(toy[1]), "--against", str(toy[0]), "--only", only)
    assert code == 0, out + err
    assert "the same template, special tokens and stop ids" in out and "llama.cpp token parity:" in out
    changed = write_gguf(toy[1], tmp_path / "t.gguf", chat_template=GOOD + " ").output
    code, out, err = run(capsys, "verify", str(changed), "--against", str(toy[0]), "--only", only, "--json")
    assert code == 1
    (difference,) = json.loads(out)["gguf"]["against"]["differences"]
    assert difference["what"].startswith("chat template 'default'")


def test_cli_corrupt_gguf_exits_2_without_traceback(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 9) + b"\x05")
    code, _, err = run(capsys, "verify", str(bad))
    assert code == 2 and "Traceback" not in err
    assert "the file is truncated or corrupt" in err and "to fix: download the file again" in err


def test_cli_against_needs_a_gguf_source(toy: tuple[Path, Path], capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "verify", str(toy[0]), "--against", str(toy[0]))
    assert code == 2 and "is not a GGUF file" in err


def test_cli_install_into_a_gguf(toy: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    template = tmp_path / "t.jinja"
    template.write_text(GOOD.replace("<|im_start|>' + m.role", "<|im_start|>' + m.role + ':'"))
    out = tmp_path / "out.gguf"
    args = ["install", "--template", str(template), "--gguf", str(toy[1]), "--output", str(out)]
    code, _, err = run(capsys, *args)  # tool-call tags inferred as markup: the vocabulary would have to grow
    assert code == 2 and "lacks <tool_call> (it would be id" in err and "--reuse-reserved" in err
    assert not out.exists()
    assert "--control-token TAG makes it a control token" in err
    template.write_text(PLAIN_CHATML)
    code, plan, err = run(capsys, *args, "--dry-run")
    assert code == 0, err
    assert "tokenizer.chat_template" in plan and not out.exists()
    code, text, err = run(capsys, *args)
    assert code == 0, err
    assert read_gguf(out).chat_template == PLAIN_CHATML and "written:" in text
    assert _tensor_part(out) == _tensor_part(toy[1])
    code, _, err = run(capsys, *args)
    assert code == 2 and "exists" in err


def test_cli_install_writes_tags_over_reserved_slots(toy: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    template = tmp_path / "t.jinja"
    template.write_text(GOOD)
    out = tmp_path / "out.gguf"
    args = ["install", "--template", str(template), "--gguf", str(toy[1]), "--output", str(out), "--reuse-reserved"]
    code, _, err = run(capsys, *args, "--control-token", "<tool_call>", "--control-token", "</tool_call>")
    assert code == 0, err
    before, after = read_gguf(toy[1]), read_gguf(out)
    renamed = {i: (a, b) for i, (a, b) in enumerate(zip(before.tokens, after.tokens)) if a != b}
    assert renamed == {
        3: ("<|reserved_special_token_0|>", "<tool_call>"),
        4: ("<|reserved_special_token_1|>", "</tool_call>"),
    }
    assert after.token_type(3) == after.token_type(4) == "CONTROL"
    assert compare_gguf(out, toy[0]).differences  # the GGUF now differs from the folder it came from, by name


def test_errors_are_package_errors() -> None:
    assert issubclass(GgufFileError, HfChatTemplatesError) and issubclass(GgufFileError, OSError)


def test_a_tokenizer_model_transformers_cannot_build_is_refused_by_name(
    toy: tuple[Path, Path], tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    from hf_chat_templates.gguf.writing import GgufValue, encode_entry

    layout = read_layout(toy[1])
    raw = toy[1].read_bytes()
    entry = next(e for e in layout.entries if e.key == "tokenizer.ggml.model")
    out = tmp_path / "bert.gguf"
    out.write_bytes(raw[: entry.start] + encode_entry("<", entry.key, GgufValue(8, None, "bert")) + raw[entry.end :])
    assert read_gguf(out).model == "bert"  # reading works for any model
    code, _, err = run(capsys, "verify", str(out))
    assert code == 2 and "cannot build a tokenizer from GGUF tokenizer model 'bert'" in err
    assert "gpt2, llama, t5, gemma4" in err and "to fix:" in err


def test_cli_install_into_a_gguf_keeps_add_bos_unless_asked(toy: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    source = write_gguf(toy[1], tmp_path / "bos.gguf", add_bos_token=True).output
    template = tmp_path / "t.jinja"
    template.write_text("{{ bos_token }}" + PLAIN_CHATML)
    args = ["install", "--template", str(template), "--gguf", str(source), "--output"]
    code, out, err = run(capsys, *args, str(tmp_path / "kept.gguf"))
    assert code == 0, err
    assert read_gguf(tmp_path / "kept.gguf").add_bos_token is True
    assert "BOS <s>: tokenizer.ggml.add_bos_token kept, so a plain-text prompt starts with it" in out
    code, out, err = run(capsys, *args, str(tmp_path / "dropped.gguf"), "--no-bos-postprocessor")
    assert code == 0, err
    assert read_gguf(tmp_path / "dropped.gguf").add_bos_token is False
    assert "BOS <s>: tokenizer.ggml.add_bos_token set false (--no-bos-postprocessor)" in out


def test_cli_a_gguf_stop_fix_names_install_gguf_and_works(toy: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # eos and eot both </s>: the template's <|im_end|> is no stop id of the file
    bad = write_gguf(toy[1], tmp_path / "bad.gguf", chat_template=PLAIN_CHATML, token_ids={"eos": 2, "eot": 2}).output
    only = ["--only", "stop-token-registered,generation-config-consistent", "--json"]
    code, out, _ = run(capsys, "verify", str(bad), *only)
    assert code == 1
    result = next(c for c in json.loads(out)["checks"] if c["id"] == "stop-token-registered")
    assert (
        "is neither in the GGUF's stop ids (tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id) [2]"
        in (result["message"])
    )
    fix = f"hf-chat-templates install --gguf {bad} --stop-token '<|im_end|>' --output FIXED.gguf"
    assert result["hint"].startswith(fix)
    assert "generation_config" not in result["message"] + result["hint"] and "hfct-gguf-" not in result["hint"]
    consistent = next(c for c in json.loads(out)["checks"] if c["id"] == "generation-config-consistent")
    assert consistent["message"] == "the GGUF's bos, eos and stop ids agree with the tokenizer"
    fixed = tmp_path / "fixed.gguf"
    code, _, err = run(capsys, "install", "--gguf", str(bad), "--stop-token", "<|im_end|>", "--output", str(fixed))
    assert code == 0, err
    assert read_gguf(fixed).chat_template == PLAIN_CHATML
    code, out, err = run(capsys, "verify", str(fixed), *only)
    assert code == 0, out + err


def test_install_gguf_own_template_needs_one(toy: tuple[Path, Path], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from hf_chat_templates.gguf.writing import GgufValue, encode_entry

    layout = read_layout(toy[1])
    raw = toy[1].read_bytes()
    entry = next(e for e in layout.entries if e.key == "tokenizer.chat_template")
    bare = tmp_path / "bare.gguf"
    bare.write_bytes(
        raw[: entry.start] + encode_entry("<", "general.comment", GgufValue(8, None, "x")) + raw[entry.end :]
    )
    code, _, err = run(capsys, "install", "--gguf", str(bare), "--output", str(tmp_path / "o.gguf"))
    assert code == 2 and "has no tokenizer.chat_template to install again" in err and "--template FILE" in err
