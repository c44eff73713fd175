"""install on a small trained tokenizer: the plan, the files, the tokens, and that nothing is lost."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pytest

from hf_chat_templates import apply_install, get_family, install, plan_install
from hf_chat_templates.errors import (
    InstallCheckError,
    OutputExistsError,
    TokenizerFolderError,
    UnknownNameError,
    UsageError,
)
from hf_chat_templates.installation.plan import BosPlan
from hf_chat_templates.tokenizer.vocab import register_control_tokens

from ..helpers import snapshot

GIGA_TOKENS = ["<|role_sep|>", "<|message_sep|>", "<|function_call|>"]


def _load(folder: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def test_plan_writes_nothing(toy_tokenizer: Path, tmp_path: Path) -> None:
    before = snapshot(toy_tokenizer)
    plan = plan_install("gigachat3", toy_tokenizer, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert snapshot(toy_tokenizer) == before
    assert [t.token for t in plan.tokens] == GIGA_TOKENS
    assert [t.action for t in plan.tokens] == ["added"] * 3
    assert plan.vocab_size_after == plan.vocab_size_before + 3
    assert plan.eos_token == ("</s>", "<|message_sep|>")
    assert plan.pad_token == (None, "<unk>")
    assert plan.generation_eos_before == (2,)
    assert plan.generation_eos_after == (2, plan.stop_token_ids[0])
    actions = {f.path: f.action for f in plan.files}
    assert actions == {
        "tokenizer.json": "change",
        "tokenizer_config.json": "change",
        "generation_config.json": "change",
        "chat_template.jinja": "add",
    }
    assert "resize the model's embeddings" in plan.describe()
    assert plan.to_dict()["resize_embeddings_to"] == plan.vocab_size_after


def test_install_writes_a_folder_that_reloads(toy_tokenizer: Path, tmp_path: Path) -> None:
    before = snapshot(toy_tokenizer)
    out = tmp_path / "out"
    result = install("gigachat3", toy_tokenizer, out)
    assert snapshot(toy_tokenizer) == before  # the source is never touched
    assert result.replaced_to is None and not result.already_installed
    template = get_family("gigachat3").variant().template
    assert (out / "chat_template.jinja").read_text(encoding="utf-8") == template
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == template
    tok = _load(out)
    assert tok.chat_template == template
    for change in result.plan.tokens:
        assert tok.encode(change.token, add_special_tokens=False) == [change.id]
        assert change.token in tok.all_special_tokens or tok.convert_ids_to_tokens(change.id) == change.token
        # special tokens are dropped when decoding with skip_special_tokens
        assert tok.decode([change.id], skip_special_tokens=True) == ""
    assert tok.eos_token == "<|message_sep|>"
    gen = json.loads((out / "generation_config.json").read_text())
    assert tok.convert_tokens_to_ids("<|message_sep|>") in gen["eos_token_id"]
    assert oct(out.stat().st_mode & 0o777) != "0o700"  # an ordinary folder, not a private temp dir


def test_reuse_reserved_keeps_the_vocabulary_size(toy_tokenizer: Path, tmp_path: Path) -> None:
    result = install("gigachat3", toy_tokenizer, tmp_path / "out", reuse_reserved=True)
    plan = result.plan
    assert plan.vocab_size_after == plan.vocab_size_before
    assert [t.action for t in plan.tokens] == ["renamed-reserved"] * 3
    assert [t.previous for t in plan.tokens] == [f"<|reserved_special_token_{i}|>" for i in range(3)]
    tok = _load(tmp_path / "out")
    assert len(tok) == plan.vocab_size_before
    assert tok.convert_tokens_to_ids("<|reserved_special_token_0|>") == tok.unk_token_id  # the old name is gone


def test_reuse_reserved_falls_back_to_adding_with_a_warning(toy_tokenizer: Path, tmp_path: Path) -> None:
    # Three control tokens, two reserved slots (the third is renamed away first): the last one is added.
    tj_path = toy_tokenizer / "tokenizer.json"
    tj_path.write_text(tj_path.read_text().replace("<|reserved_special_token_2|>", "<extra>"))
    plan = plan_install("llama3.2-pythonic", toy_tokenizer, tmp_path / "out", reuse_reserved=True)
    assert [t.action for t in plan.tokens] == ["renamed-reserved", "renamed-reserved", "added"]
    assert plan.vocabulary_grew == 1
    assert any("no unused reserved slot left for <|eot_id|>" in w for w in plan.warnings)


def test_existing_token_made_special(toy_tokenizer: Path, tmp_path: Path) -> None:
    # A control token that exists as a plain added token, and one that is an ordinary vocabulary piece.
    tj_path = toy_tokenizer / "tokenizer.json"
    tj = json.loads(tj_path.read_text(encoding="utf-8"))
    next_id = max([*tj["model"]["vocab"].values(), *(e["id"] for e in tj["added_tokens"])]) + 1
    tj["added_tokens"].append(
        {
            "id": next_id,
            "content": "<|role_sep|>",
            "single_word": False,
            "lstrip": True,
            "rstrip": False,
            "normalized": True,
            "special": False,
        }
    )
    tj_path.write_text(json.dumps(tj), encoding="utf-8")
    plan = plan_install("gigachat3", toy_tokenizer, tmp_path / "out")
    first = plan.tokens[0]
    assert (first.action, first.id) == ("made-special", next_id)
    assert "lstrip=True" in (first.previous or "") and "special=False" in (first.previous or "")
    apply_install(plan)
    tok = _load(tmp_path / "out")
    # no longer lstrip: the space before it stays a token of its own
    ids = tok.encode("a <|role_sep|>", add_special_tokens=False)
    assert ids[-1] == next_id and tok.decode(ids[:-1]) == "a "
    # a piece of the learned vocabulary can become a control token too
    piece = next(p for p in json.loads(tj_path.read_text())["model"]["vocab"] if len(p) > 4 and p.isalpha())
    _, changes, _ = register_control_tokens(json.loads(tj_path.read_text()), [piece], reuse_reserved=False)
    assert changes[0].action == "made-special" and changes[0].previous == "a plain vocabulary piece"


def test_install_twice_is_byte_identical(toy_tokenizer: Path, tmp_path: Path) -> None:
    install("llama3.2-pythonic", toy_tokenizer, tmp_path / "a")
    install("llama3.2-pythonic", toy_tokenizer, tmp_path / "b")
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")
    # Installing again on the result changes nothing: every file is kept as it is.
    again = plan_install("llama3.2-pythonic", tmp_path / "a", tmp_path / "c")
    assert {f.action for f in again.files} == {"keep"}
    assert {t.action for t in again.tokens} == {"unchanged"}
    # And installing into the same output with --force is a no-op, not a replacement.
    result = install("llama3.2-pythonic", toy_tokenizer, tmp_path / "a", force=True)
    assert result.already_installed and result.replaced_to is None


def test_force_keeps_what_it_replaces(toy_tokenizer: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    install("gigachat3", toy_tokenizer, out)
    first = snapshot(out)
    result = install("llama3.2-pythonic", toy_tokenizer, out, force=True)
    assert result.replaced_to is not None and snapshot(result.replaced_to) == first
    assert _load(out).eos_token == "<|eot_id|>"


def test_format_jinja_removes_the_config_key(toy_tokenizer: Path, tmp_path: Path) -> None:
    install("gigachat3", toy_tokenizer, tmp_path / "both")
    install("llama3.2-pythonic", tmp_path / "both", tmp_path / "jinja", format="jinja")
    config = json.loads((tmp_path / "jinja" / "tokenizer_config.json").read_text())
    assert "chat_template" not in config
    assert _load(tmp_path / "jinja").chat_template == get_family("llama3.2-pythonic").variant().template


def test_format_config_removes_a_stale_jinja_file(toy_tokenizer: Path, tmp_path: Path) -> None:
    install("gigachat3", toy_tokenizer, tmp_path / "both")
    plan = plan_install("llama3.2-pythonic", tmp_path / "both", tmp_path / "config", format="config")
    assert {f.path: f.action for f in plan.files}["chat_template.jinja"] == "remove"
    apply_install(plan)
    assert not (tmp_path / "config" / "chat_template.jinja").exists()
    assert _load(tmp_path / "config").chat_template == get_family("llama3.2-pythonic").variant().template


def test_missing_generation_config_is_created(toy_tokenizer: Path, tmp_path: Path) -> None:
    (toy_tokenizer / "generation_config.json").unlink()
    result = install("llama3.2-pythonic", toy_tokenizer, tmp_path / "out")
    gen = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    eot = result.plan.stop_token_ids[0]
    assert gen["eos_token_id"] == [eot, 2]  # the stop token first, then the tokenizer's old eos
    assert gen["pad_token_id"] == 0 and gen["bos_token_id"] == 1


def test_other_files_are_copied_byte_for_byte(toy_tokenizer: Path, tmp_path: Path) -> None:
    (toy_tokenizer / "README.md").write_bytes(b"# model card\n\xe2\x9c\x93\n")
    (toy_tokenizer / "sub").mkdir()
    (toy_tokenizer / "sub" / "notes.txt").write_bytes(b"keep me")
    install("gigachat3", toy_tokenizer, tmp_path / "out")
    assert (tmp_path / "out" / "README.md").read_bytes() == b"# model card\n\xe2\x9c\x93\n"
    assert (tmp_path / "out" / "sub" / "notes.txt").read_bytes() == b"keep me"


def test_a_failing_reload_check_publishes_nothing(toy_tokenizer: Path, tmp_path: Path) -> None:
    plan = plan_install("gigachat3", toy_tokenizer, tmp_path / "out")
    broken = dataclasses.replace(plan, expected_template="something else")
    with pytest.raises(InstallCheckError, match="reloaded chat_template differs"):
        apply_install(broken)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out*"))  # the staging folder is gone too


def test_pad_equal_to_eos_warns(toy_tokenizer: Path, tmp_path: Path) -> None:
    _pad_is_eot(toy_tokenizer)
    plan = plan_install("llama3.2-pythonic", toy_tokenizer, tmp_path / "out")
    assert any("pad_token <|eot_id|> is also a stop token" in w for w in plan.warnings)


def _pad_is_eot(toy_tokenizer: Path) -> None:
    """The toy tokenizer with <|eot_id|> registered and set as its pad token."""
    config_path = toy_tokenizer / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["pad_token"] = "<|eot_id|>"
    config_path.write_text(json.dumps(config))
    tj_path = toy_tokenizer / "tokenizer.json"
    tj = json.loads(tj_path.read_text())
    next_id = max([*tj["model"]["vocab"].values(), *(e["id"] for e in tj["added_tokens"])]) + 1
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    tj["added_tokens"].append({"id": next_id, "content": "<|eot_id|>", **flags})
    tj_path.write_text(json.dumps(tj))


def test_pad_token_replaces_a_pad_that_is_the_stop_token(toy_tokenizer: Path, tmp_path: Path) -> None:
    _pad_is_eot(toy_tokenizer)
    (warning,) = [w for w in plan_install("llama3.2-pythonic", toy_tokenizer, tmp_path / "o").warnings if "pad" in w]
    assert "install keeps the tokenizer's pad: pass --pad-token TOKEN (e.g. --pad-token <unk>)" in warning
    out = tmp_path / "out"
    result = install("llama3.2-pythonic", toy_tokenizer, out, pad_token="<|reserved_special_token_2|>")
    assert result.plan.pad_token == ("<|eot_id|>", "<|reserved_special_token_2|>")
    assert not [w for w in result.plan.warnings if "pad" in w]
    tok = _load(out)
    assert tok.pad_token == "<|reserved_special_token_2|>"
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["pad_token_id"] == tok.pad_token_id


@pytest.mark.parametrize(
    ("pad", "message", "fix"),
    [
        ("<pad>", "pad_token '<pad>' is not in the vocabulary (", "pass a token the tokenizer has such as <unk>"),
        ("<|eot_id|>", "pad_token <|eot_id|> is a stop token (<|eot_id|>)", "not a stop token such as"),
        ("<|start_header_id|>", "is a control token the template writes", "a token the template does not write"),
    ],
)
def test_pad_token_that_cannot_pad_is_refused(
    toy_tokenizer: Path, tmp_path: Path, pad: str, message: str, fix: str
) -> None:
    with pytest.raises(UsageError) as caught:
        plan_install("llama3.2-pythonic", toy_tokenizer, tmp_path / "out", pad_token=pad)
    assert message in str(caught.value) and fix in (caught.value.hint or "")
    assert not (tmp_path / "out").exists()


def test_pad_token_that_is_text_warns(toy_tokenizer: Path, tmp_path: Path) -> None:
    plan = plan_install("llama3.2-pythonic", toy_tokenizer, tmp_path / "out", pad_token="a")
    assert plan.pad_token[1] == "a"
    assert any("pad_token a is not a special token" in w for w in plan.warnings)


# ---- bad input: a clear error, and the source untouched ----


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(TokenizerFolderError, match="no such folder"):
        plan_install("gigachat3", tmp_path / "nope", tmp_path / "out")


def test_folder_without_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "config.json").write_text("{}")
    with pytest.raises(TokenizerFolderError, match="no tokenizer here"):
        plan_install("gigachat3", tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_corrupt_tokenizer_config(toy_tokenizer: Path, tmp_path: Path) -> None:
    (toy_tokenizer / "tokenizer_config.json").write_text('{\n  "eos_token": "</s>",\n  oops\n}')
    before = snapshot(toy_tokenizer)
    with pytest.raises(TokenizerFolderError) as err:
        install("gigachat3", toy_tokenizer, tmp_path / "out")
    assert "tokenizer_config.json, line 3, column 3: invalid JSON" in str(err.value)
    assert snapshot(toy_tokenizer) == before
    assert not (tmp_path / "out").exists()


def test_tokenizer_config_not_an_object(toy_tokenizer: Path, tmp_path: Path) -> None:
    (toy_tokenizer / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(TokenizerFolderError, match="expected a JSON object at the top level, found list"):
        plan_install("gigachat3", toy_tokenizer, tmp_path / "out")


def test_unknown_family(toy_tokenizer: Path, tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match=r"families: gemma3-tools, gigachat3, gpt-oss, llama3\.2-pythonic"):
        plan_install("gigachat", toy_tokenizer, tmp_path / "out")


def test_existing_output_needs_force(toy_tokenizer: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="exists and is not empty") as err:
        install("gigachat3", toy_tokenizer, out)
    assert "pass force to replace it" in (err.value.hint or "")  # the CLI says --force (tests/unit/test_errors.py)
    assert err.value.parameter == "output" and err.value.path == out.absolute()
    assert snapshot(out) == {"precious.txt": b"mine"}


def test_output_equal_to_source_needs_force(toy_tokenizer: Path) -> None:
    with pytest.raises(UsageError, match="output is the source folder") as err:
        plan_install("gigachat3", toy_tokenizer, toy_tokenizer)
    assert err.value.parameter == "output"


def test_unwritable_output(toy_tokenizer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = snapshot(toy_tokenizer)
    parent = tmp_path / "ro"
    parent.mkdir()
    if os.geteuid() != 0:  # root ignores permission bits, so simulate the refusal there
        parent.chmod(0o555)
    else:

        def refuse(*args: object, **kwargs: object) -> str:
            raise PermissionError(13, "Permission denied", str(parent))

        monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    try:
        with pytest.raises(TokenizerFolderError, match="cannot write the output folder here") as err:
            install("gigachat3", toy_tokenizer, parent / "out")
        assert "Permission denied" in str(err.value)
    finally:
        parent.chmod(0o755)
    assert snapshot(toy_tokenizer) == before
    assert not (parent / "out").exists()


def test_hub_id_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from hf_chat_templates.errors import HubError

    with pytest.raises(HubError, match="no such local folder, and the Hub repo could not be fetched"):
        plan_install("gigachat3", "some-org/some-model", tmp_path / "out")


def _bos_counts(folder: Path) -> dict[str, int]:
    """BOS on each way to tokenize: plain text, a rendering with the defaults, without special tokens, and
    apply_chat_template(tokenize=True)."""
    tok = _load(folder)
    messages = [{"role": "user", "content": "hi"}]
    rendered = tok.apply_chat_template(messages, tokenize=False)
    return {
        "tokenizer(text)": tok("hello")["input_ids"].count(tok.bos_token_id),
        "tokenizer(rendered)": tok(rendered)["input_ids"].count(tok.bos_token_id),
        "add_special_tokens=False": tok(rendered, add_special_tokens=False)["input_ids"].count(tok.bos_token_id),
        "tokenize=True": tok.apply_chat_template(messages, tokenize=True)["input_ids"].count(tok.bos_token_id),
    }


def test_the_post_processor_bos_is_kept_by_default(toy_tokenizer: Path, tmp_path: Path) -> None:
    # gigachat3 writes {{ bos_token }}; the toy tokenizer's post-processor adds <s> too. Plain text keeps its BOS.
    result = install("gigachat3", toy_tokenizer, tmp_path / "out")
    assert result.plan.bos_dropped_from_post_processor is None
    assert result.plan.bos == BosPlan("<s>", template_writes=True, tokenizer_adds=True, dropped=False)
    line = next(line for line in result.plan.describe().splitlines() if "BOS <s>" in line)
    assert "the post-processor keeps adding it" in line and "--no-bos-postprocessor" in line
    assert "apply_chat_template(..., tokenize=True) or tokenizer(text, add_special_tokens=False)" in line
    assert result.plan.to_dict()["bos"] == {
        "token": "<s>",
        "template_writes": True,
        "tokenizer_adds": True,
        "dropped": False,
    }
    assert _bos_counts(tmp_path / "out") == {
        "tokenizer(text)": 1,
        "tokenizer(rendered)": 2,  # the calling convention no-double-bos warns about
        "add_special_tokens=False": 1,
        "tokenize=True": 1,
    }


def test_no_bos_postprocessor_drops_the_bos_the_template_writes(toy_tokenizer: Path, tmp_path: Path) -> None:
    result = install("gigachat3", toy_tokenizer, tmp_path / "out", bos_postprocessor=False)
    assert result.plan.bos_dropped_from_post_processor == "<s>"
    assert result.plan.bos == BosPlan("<s>", template_writes=True, tokenizer_adds=False, dropped=True)
    assert "BOS <s>: dropped from the post-processor (--no-bos-postprocessor)" in result.plan.describe()
    assert "tokenizer(text) on plain text (eval harnesses, completions) gives none" in result.plan.describe()
    assert _bos_counts(tmp_path / "out") == {
        "tokenizer(text)": 0,
        "tokenizer(rendered)": 1,
        "add_special_tokens=False": 1,
        "tokenize=True": 1,
    }


def test_no_bos_postprocessor_sets_add_bos_token_false(toy_tokenizer: Path, tmp_path: Path) -> None:
    config_path = toy_tokenizer / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "add_bos_token": True}))
    kept = plan_install("gigachat3", toy_tokenizer, tmp_path / "kept")
    assert kept.bos is not None and kept.bos.tokenizer_adds and not kept.bos.dropped
    dropped = install("gigachat3", toy_tokenizer, tmp_path / "out", bos_postprocessor=False)
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["add_bos_token"] is False
    assert dropped.plan.bos is not None and not dropped.plan.bos.tokenizer_adds
    assert _bos_counts(tmp_path / "out")["tokenizer(text)"] == 0


def test_template_without_bos_keeps_the_post_processor(toy_tokenizer: Path, tmp_path: Path) -> None:
    # Harmony writes no BOS: nothing to drop, even when asked
    result = install("gpt-oss", toy_tokenizer, tmp_path / "out", bos_postprocessor=False)
    assert result.plan.bos_dropped_from_post_processor is None
    assert "BOS <s>: added by tokenizer(text) (unchanged); the template does not write it" in result.plan.describe()
    assert _load(tmp_path / "out")("hello")["input_ids"][0] == 1
