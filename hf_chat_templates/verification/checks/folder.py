"""Publish-guard checks on the files of a tokenizer folder: the copies of one fact must agree with each other."""

from __future__ import annotations

import shlex
from typing import Any

from ...template.syntax import transformers_text
from ...tokenizer.folder import (
    CHAT_TEMPLATE_DIR,
    CHAT_TEMPLATE_FILE,
    GENERATION_CONFIG,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
)
from ...tokenizer.vocab import CONTROL_FLAGS, token_content
from ..context import VerifyContext
from ..results import CheckResult, Finding, first_difference, verdict

FLAGS = ("content", *CONTROL_FLAGS)


def _how_they_differ(a: str, b: str) -> str:
    """How the file `a` (read as transformers reads it) and the config key `b` differ: from which line, or only in
    the key's line endings."""
    if transformers_text(a) == transformers_text(b):
        return (
            "differ only in line endings: the key holds carriage returns, which transformers' Jinja reads as "
            "newlines but minijinja keeps"
        )
    pos = first_difference(a, b)
    line = a.count("\n", 0, pos) + 1
    return f"differ from line {line}"


def template_sources_agree(ctx: VerifyContext) -> CheckResult:
    folder = ctx.folder
    if folder is None:
        return CheckResult("template-sources-agree", "skip", "no folder to read")
    findings = []
    named = folder.config_templates()
    default = named.get("default")
    if folder.chat_template_file is not None and default is not None and folder.chat_template_file != default:
        findings.append(
            Finding(
                None,
                f"{CHAT_TEMPLATE_FILE} and {TOKENIZER_CONFIG} key 'chat_template' "
                f"{_how_they_differ(folder.chat_template_file, default)}:"
                " transformers reads the file, TGI and llama.cpp's converter the key",
                {"file": CHAT_TEMPLATE_FILE, "key": "chat_template"},
            )
        )
    for name, text in folder.additional_templates.items():
        if name in named and named[name] != text:
            findings.append(
                Finding(
                    None,
                    f"{CHAT_TEMPLATE_DIR}/{name}.jinja and the '{name}' entry of "
                    f"{TOKENIZER_CONFIG} 'chat_template' {_how_they_differ(text, named[name])}",
                    {"file": f"{CHAT_TEMPLATE_DIR}/{name}.jinja", "key": "chat_template"},
                )
            )
    if folder.chat_template_file is None and not named:
        return CheckResult("template-sources-agree", "skip", "the folder holds no chat template")
    return verdict(
        "template-sources-agree",
        findings,
        "chat_template.jinja, the config key and additional_chat_templates/ say the same thing",
        f"reinstall with {ctx.install_command('--format both')}, which writes them together",
    )


def added_tokens_agree(ctx: VerifyContext) -> CheckResult:
    folder = ctx.folder
    if folder is None or folder.added_tokens is None:
        return CheckResult("added-tokens-agree", "skip", "no tokenizer.json to compare")
    decoder = folder.tokenizer_config.get("added_tokens_decoder")
    if not isinstance(decoder, dict):
        return CheckResult("added-tokens-agree", "pass", f"{TOKENIZER_CONFIG} has no added_tokens_decoder to disagree")
    findings = []
    by_id = {e["id"]: e for e in folder.added_tokens}
    for key, entry in decoder.items():
        token_id = int(key)
        ours = by_id.get(token_id)
        if ours is None:
            findings.append(
                Finding(
                    None,
                    f"{TOKENIZER_CONFIG} added_tokens_decoder[{key}] "
                    f"{entry.get('content')!r} is not an added token of {TOKENIZER_JSON}",
                    {"id": token_id, "file": TOKENIZER_CONFIG},
                )
            )
            continue
        diffs = [
            f"{k}: {ours.get(k)!r} vs {entry.get(k)!r}" for k in FLAGS if k in entry and ours.get(k) != entry.get(k)
        ]
        if diffs:
            findings.append(
                Finding(
                    None,
                    f"id {token_id}: {TOKENIZER_JSON} and {TOKENIZER_CONFIG} disagree on " + "; ".join(diffs),
                    {"id": token_id},
                )
            )
    for token_id, entry in by_id.items():
        if str(token_id) not in decoder:
            findings.append(
                Finding(
                    None,
                    f"id {token_id} {entry['content']!r} is an added token of {TOKENIZER_JSON} "
                    f"but missing from {TOKENIZER_CONFIG} added_tokens_decoder",
                    {"id": token_id},
                )
            )
    return verdict(
        "added-tokens-agree",
        findings,
        f"{len(by_id)} added tokens agree, ids and flags",
        "reinstall, or make added_tokens_decoder a copy of tokenizer.json's added_tokens",
    )


def _ids(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


def generation_config_consistent(ctx: VerifyContext) -> CheckResult:
    folder = ctx.folder
    if folder is None:
        return CheckResult("generation-config-consistent", "skip", "no folder to read")
    gen = folder.generation_config
    if gen is None:
        return CheckResult(
            "generation-config-consistent",
            "warn",
            f"no {GENERATION_CONFIG}: generation uses the model config's eos, which may not be the turn's stop token",
            hint=f"{ctx.install_command()} writes one",
        )
    tok = ctx.tokenizer
    size = len(tok)
    findings = []
    eos_ids = _ids(gen.get("eos_token_id"))
    if tok.eos_token_id is not None and tok.eos_token_id not in eos_ids:
        findings.append(_eos_finding(ctx, eos_ids))
    for key, attr in (("bos_token_id", "bos_token_id"), ("pad_token_id", "pad_token_id")):
        value = gen.get(key)
        ours = getattr(tok, attr)
        if isinstance(value, int) and ours is not None and value != ours:
            name = token_content(folder.tokenizer_config.get(key.replace("_id", "")))
            findings.append(
                Finding(
                    None,
                    f"{ctx.generation_key(key)} is {value} but the tokenizer's is {ours} ({name})",
                    {"key": key},
                    hint=_mismatch_fix(ctx, key, ours, name),
                )
            )
    for key in ("eos_token_id", "bos_token_id", "pad_token_id", "decoder_start_token_id"):
        for value in _ids(gen.get(key)):
            if not 0 <= value < size:
                findings.append(
                    Finding(
                        None,
                        f"{ctx.generation_key(key)} {value} is outside the vocabulary (0..{size - 1})",
                        {"key": key},
                        hint=f"correct or remove {value} in {ctx.generation_key(key)}: install leaves it as it is",
                    )
                )
    where = "the GGUF's bos, eos and stop ids agree" if ctx.gguf is not None else f"{GENERATION_CONFIG} agrees"
    return verdict(
        "generation-config-consistent",
        findings,
        f"{where} with the tokenizer",
        f"{ctx.install_command()} merges the eos and stop ids into {ctx.generation_key('eos_token_id')}",
    )


def _eos_finding(ctx: VerifyContext, eos_ids: list[int]) -> Finding:
    """The tokenizer's eos is not a generation stop: an error, unless generation stops on the template's turn end
    (Kimi K2 stops on `<|im_end|>` and never on its `[EOS]`), where it is for the record."""
    tok = ctx.tokenizer
    key = ctx.generation_key("eos_token_id")
    turn_ends = [t for t in ctx.stop_tokens if ctx.token_id(t) in eos_ids] if ctx.tokens.turn_end else []
    if turn_ends:
        return Finding(
            None,
            f"{key} {eos_ids} lacks the tokenizer's eos_token {tok.eos_token} (id {tok.eos_token_id}); generation "
            f"stops on the template's turn end {' '.join(turn_ends)}, so the eos_token ends no turn the template "
            f"writes",
            {"key": "eos_token_id"},
            severity="info",
            hint=f"add {tok.eos_token_id} to {key} if the model also ends text with {tok.eos_token}",
        )
    return Finding(
        None,
        f"{key} {eos_ids} lacks the tokenizer's eos_token {tok.eos_token} (id {tok.eos_token_id})",
        {"key": "eos_token_id"},
    )


def _mismatch_fix(ctx: VerifyContext, key: str, ours: int, name: str | None) -> str:
    """The fix for a generation bos or pad id that is not the tokenizer's: install sets pad_token_id only with the
    pad it is asked for, and leaves an existing bos_token_id as it is."""
    if key == "pad_token_id" and name:
        return (
            f"{ctx.install_command(f'--pad-token {shlex.quote(name)}')} writes it as {key} (without --pad-token, "
            "install leaves an existing pad_token_id as it is)"
        )
    return f"set {ctx.generation_key(key)} to {ours} ({name}): install leaves an existing {key} as it is"
