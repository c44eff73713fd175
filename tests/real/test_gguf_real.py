"""GGUF files of the real Llama 3 tokenizer (vocabulary-only, as llama.cpp's converter writes them): the round trip
folder -> GGUF -> verify --against, install into a GGUF, and the tokenizer transformers builds from the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import install
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.gguf import read_gguf
from hf_chat_templates.gguf.comparing import compare_gguf
from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.installing import apply_gguf_install, plan_gguf_install
from hf_chat_templates.gguf.loading import load_gguf_tokenizer
from hf_chat_templates.gguf.parity import llama_cpp_parity
from hf_chat_templates.gguf.reading import read_layout
from hf_chat_templates.gguf.writing import write_gguf
from tests.helpers import run

FAMILY = "llama3.2-pythonic"
CHECKS = "renders,control-tokens-atomic,ids-match-string,no-double-bos,stop-token-registered,reference-parity"


@pytest.fixture(scope="session")
def llama3_gguf(llama3_base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The base Llama 3 tokenizer and the family installed on it, each with its vocabulary-only GGUF file."""
    root = tmp_path_factory.mktemp("gguf-real")
    folder = install(FAMILY, llama3_base, root / "installed").output
    return {
        "base": llama3_base,
        "base.gguf": export_vocab_gguf(llama3_base, root / "base.gguf", pre="llama-bpe"),
        "installed": folder,
        "installed.gguf": export_vocab_gguf(folder, root / "installed.gguf", pre="llama-bpe"),
    }


def test_the_gguf_of_an_installed_folder_passes_verify_against_it(llama3_gguf: dict[str, Path], capsys) -> None:  # type: ignore[no-untyped-def]
    gguf, folder = llama3_gguf["installed.gguf"], llama3_gguf["installed"]
    assert compare_gguf(gguf, folder).ok
    code, out, err = run(capsys, "verify", str(gguf), "--against", str(folder), "--only", CHECKS, "--json")
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["source"] == str(gguf) and doc["family"] == FAMILY
    assert {c["id"]: c["status"] for c in doc["checks"]}["reference-parity"] == "pass"
    assert doc["gguf"]["against"]["ok"] and doc["gguf"]["against"]["differences"] == []


def test_the_base_gguf_against_the_installed_folder_names_each_difference(llama3_gguf: dict[str, Path]) -> None:
    differences = {d.what: d for d in compare_gguf(llama3_gguf["base.gguf"], llama3_gguf["installed"]).differences}
    assert set(differences) == {
        "chat template 'default' (tokenizer.chat_template)",
        "eos id (tokenizer.ggml.eos_token_id)",
        "stop id 128009 ('<|eot_id|>')",
    }  # add BOS is the same: install keeps the post-processor's BOS (tokenizer(text) on plain text keeps it)
    assert "recent llama.cpp stops on it by its text" in differences["stop id 128009 ('<|eot_id|>')"].gguf
    assert differences["eos id (tokenizer.ggml.eos_token_id)"].gguf == "128001 ('<|end_of_text|>')"


def test_install_into_the_base_gguf_gives_what_the_folder_install_gives(
    llama3_gguf: dict[str, Path], tmp_path: Path
) -> None:
    src = llama3_gguf["base.gguf"]
    result = apply_gguf_install(plan_gguf_install(FAMILY, src, tmp_path / "out.gguf"))
    comparison = compare_gguf(result.output, llama3_gguf["installed"])
    assert comparison.ok, comparison.describe()
    assert set(result.changed) == {
        "tokenizer.chat_template",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
        "tokenizer.ggml.padding_token_id",
    }
    old, new = read_layout(src), read_layout(result.output)
    raw_old, raw_new = src.read_bytes(), result.output.read_bytes()
    unchanged = {e.key: raw_old[e.start : e.end] for e in old.entries if e.key not in result.changed}
    assert unchanged == {e.key: raw_new[e.start : e.end] for e in new.entries if e.key not in result.changed}
    assert raw_old[old.data_offset :] == raw_new[new.data_offset :]


def test_a_gguf_whose_eos_differs_fails_verify_against_naming_it(
    llama3_gguf: dict[str, Path], tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    broken = write_gguf(llama3_gguf["installed.gguf"], tmp_path / "eos.gguf", token_ids={"eos": 128001}).output
    code, out, _ = run(capsys, "verify", str(broken), "--against", str(llama3_gguf["installed"]), "--only", "renders")
    assert code == 1
    assert "eos id (tokenizer.ggml.eos_token_id): GGUF 128001 ('<|end_of_text|>'); folder 128009 ('<|eot_id|>')" in out


def test_transformers_tokenizer_from_the_gguf_encodes_like_the_folder(llama3_gguf: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    folder = AutoTokenizer.from_pretrained(str(llama3_gguf["installed"]))
    gguf = load_gguf_tokenizer(read_gguf(llama3_gguf["installed.gguf"]))
    compared = 0
    for probe in build_probes():
        try:
            text = folder.apply_chat_template(probe.message_list(), tools=probe.tool_list(), tokenize=False)
        except Exception:  # probes the template refuses are `renders`' business
            continue
        assert gguf.encode(text, add_special_tokens=False) == folder.encode(text, add_special_tokens=False), probe.id
        compared += 1
    assert compared > 30


@pytest.mark.parametrize("name", ["base.gguf", "installed.gguf"])
def test_the_tokenizer_without_torch_is_transformers_own(
    llama3_gguf: dict[str, Path], name: str, tmp_path: Path
) -> None:
    """This package's torch-free build of the GGUF tokenizer against transformers' from_pretrained(gguf_file=...),
    which reads the file with torch: the same tokenizer.json and tokenizer_config.json, the same ids."""
    pytest.importorskip("torch", reason="transformers' own GGUF reader needs torch: pip install torch==2.13.0")
    from transformers import PreTrainedTokenizerFast

    from hf_chat_templates.gguf.loading import tokenizer_only
    from tests.unit.test_gguf_loading import TEXTS, saved

    gguf = read_gguf(llama3_gguf[name])
    ours = load_gguf_tokenizer(gguf)
    (tmp_path / "only").mkdir()
    only = tokenizer_only(gguf.path, tmp_path / "only" / name)
    theirs = PreTrainedTokenizerFast.from_pretrained(str(only.parent), gguf_file=only.name)
    theirs.chat_template = ours.chat_template  # type: ignore[attr-defined]
    assert saved(ours, tmp_path / "ours") == saved(theirs, tmp_path / "theirs")
    for text in (*TEXTS, "<|start_header_id|>user<|end_header_id|>\n\nПривет 🌍 12345<|eot_id|>"):
        assert ours.encode(text) == theirs.encode(text)  # type: ignore[attr-defined]


def test_no_bos_postprocessor_sets_add_bos_false_as_the_folder_install_drops_it(
    llama3_gguf: dict[str, Path], tmp_path: Path
) -> None:
    folder = install(FAMILY, llama3_gguf["base"], tmp_path / "dropped", bos_postprocessor=False).output
    plan = plan_gguf_install(FAMILY, llama3_gguf["base.gguf"], tmp_path / "out.gguf", bos_postprocessor=False)
    result = apply_gguf_install(plan)
    assert "tokenizer.ggml.add_bos_token" in result.changed and read_gguf(result.output).add_bos_token is False
    assert compare_gguf(result.output, folder).ok


def test_llama_cpp_parity(llama3_gguf: dict[str, Path]) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (extra llama-cpp)")
    gguf = read_gguf(llama3_gguf["installed.gguf"])
    result = llama_cpp_parity(gguf, load_gguf_tokenizer(gguf), build_probes())
    assert result.ran and result.ok and result.compared > 30, result.describe()


def test_install_gpt_oss_into_an_o200k_gguf(o200k_base: Path, tmp_path: Path) -> None:
    """Two stop tokens (<|return|>, <|call|>) and <|endoftext|> from generation_config.json: all three declared."""
    folder = install("gpt-oss", o200k_base, tmp_path / "installed").output
    src = export_vocab_gguf(o200k_base, tmp_path / "base.gguf", pre="gpt-4o")
    assert compare_gguf(src, o200k_base).ok
    result = apply_gguf_install(plan_gguf_install("gpt-oss", src, tmp_path / "out.gguf"))
    comparison = compare_gguf(result.output, folder)
    assert comparison.ok, comparison.describe()
    out = read_gguf(result.output)
    assert set(out.stop_token_ids) == {200002, 200012, 199999}
