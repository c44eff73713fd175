"""The bundled families: shipped byte-exact, validated on load, lookups that explain their misses."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from hf_chat_templates import get_family, list_families
from hf_chat_templates.errors import ConfigError, TemplateError, UnknownNameError
from hf_chat_templates.families.registry import load_family

from ..helpers import REPO_ROOT, SEEDS, spy

FAMILIES = ["gemma3-tools", "gigachat3", "gpt-oss", "llama3.2-pythonic"]


def test_four_families_are_bundled() -> None:
    assert [f.name for f in list_families()] == FAMILIES
    for fam in list_families():
        assert "upstream" in fam.variants
        var = fam.variant()
        assert set(var.stop_tokens) <= set(var.control_tokens)


@pytest.mark.parametrize("name", FAMILIES)
def test_upstream_is_the_seed_byte_exact(name: str) -> None:
    var = get_family(name).variant("upstream")
    data = var.template_path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == var.provenance["sha256"] == var.sha256
    assert var.template.encode("utf-8") == data
    seed = SEEDS / var.provenance["seed"]
    if not SEEDS.is_dir():
        pytest.skip("the seed folder is not beside this checkout")
    header, blank, template = seed.read_bytes().split(b"\n", 2)
    assert header == b"chat_template.jinja" and blank == b""
    assert template == data


def test_control_tokens_are_what_the_template_writes() -> None:
    for fam in list_families():
        var = fam.variant("upstream")
        for token in var.control_tokens:
            assert token in var.template, (fam.name, token)


def test_unknown_family_lists_families_and_closest() -> None:
    with pytest.raises(UnknownNameError) as err:
        get_family("llama3.2-pythnic")
    message = str(err.value)
    assert "gemma3-tools, gigachat3, gpt-oss, llama3.2-pythonic" in message
    assert "did you mean 'llama3.2-pythonic'" in message
    assert isinstance(err.value, LookupError)


def test_unknown_variant_lists_variants() -> None:
    with pytest.raises(UnknownNameError, match=r"family 'gpt-oss' has no variant 'upstrem'.*did you mean 'upstream'"):
        get_family("gpt-oss").variant("upstrem")


@pytest.fixture
def family_copy(tmp_path: Path) -> Path:
    target = tmp_path / "gigachat3"
    shutil.copytree(REPO_ROOT / "model_configs" / "gigachat3", target)
    return target


def _edit(folder: Path, old: str, new: str) -> None:
    path = folder / "family.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_config_unknown_key(family_copy: Path) -> None:
    _edit(family_copy, "template_writes_bos = true", "template_writes_bos = true\nstop_token = 'x'")
    with pytest.raises(ConfigError, match=r"family\.toml: unknown key 'stop_token' \(did you mean 'stop_tokens'\?\)"):
        load_family(family_copy)


def test_config_unknown_variant_key(family_copy: Path) -> None:
    _edit(family_copy, 'template = "upstream.jinja"', 'template = "upstream.jinja"\ntemplte_kwargs = {}')
    with pytest.raises(ConfigError, match=r"unknown key 'variants\.upstream\.templte_kwargs'"):
        load_family(family_copy)


def test_config_stop_token_not_control(family_copy: Path) -> None:
    _edit(family_copy, 'stop_tokens = ["<|message_sep|>"]', 'stop_tokens = ["<|eot_id|>"]')
    with pytest.raises(ConfigError) as err:
        load_family(family_copy)
    assert "family.toml" in str(err.value)
    assert "'variants.upstream.stop_tokens' lists '<|eot_id|>', which is not in its control_tokens" in str(err.value)


def test_config_missing_template_file(family_copy: Path) -> None:
    (family_copy / "upstream.jinja").unlink()
    with pytest.raises(
        ConfigError, match=r"key 'variants\.upstream\.template' names 'upstream\.jinja', which does not exist"
    ):
        load_family(family_copy)


def test_config_template_that_does_not_parse(family_copy: Path) -> None:
    path = family_copy / "upstream.jinja"
    lines = path.read_text().split("\n")
    lines[9] = "{% if broken %}"  # an unclosed block on line 10
    path.write_text("\n".join(lines))
    with pytest.raises(TemplateError) as err:
        load_family(family_copy)
    assert str(path) in str(err.value)
    assert "does not parse" in str(err.value)


def test_config_not_toml(family_copy: Path) -> None:
    (family_copy / "family.toml").write_text("name = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_family(family_copy)


def test_config_name_must_match_folder(family_copy: Path) -> None:
    _edit(family_copy, 'name = "gigachat3"', 'name = "gigachat"')
    with pytest.raises(ConfigError, match="key 'name' is 'gigachat' but the folder is 'gigachat3'"):
        load_family(family_copy)


def test_config_wrong_type(family_copy: Path) -> None:
    _edit(family_copy, "template_writes_bos = true", 'template_writes_bos = "yes"')
    with pytest.raises(ConfigError, match="key 'template_writes_bos' must be a bool, got str"):
        load_family(family_copy)


def test_template_with_carriage_return_is_refused(family_copy: Path) -> None:
    path = family_copy / "upstream.jinja"
    path.write_bytes(b"line one\r\n{{ bos_token }}")
    with pytest.raises(TemplateError, match="line 1: the template contains a carriage return"):
        load_family(family_copy)


def test_a_template_that_parsed_is_not_parsed_again_and_one_that_does_not_always_fails(
    family_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hf_chat_templates.families import registry

    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    parsed = spy(monkeypatch, registry, "check_template_syntax")
    load_family(family_copy)
    first = sorted(path for _, path in parsed)
    assert first and len(list((tmp_path / "cache" / "parsed-templates").iterdir())) == len(first)
    load_family(family_copy)
    assert sorted(path for _, path in parsed) == first  # the second load parsed none
    path = family_copy / "upstream.jinja"
    path.write_text(path.read_text() + "{% if broken %}")
    for _ in range(2):
        with pytest.raises(TemplateError, match="does not parse"):
            load_family(family_copy)
