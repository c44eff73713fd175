"""A GGUF file against the tokenizer folder it was converted from: what llama.cpp would do differently.

Each difference is a named value: what differs, the GGUF side, the folder side and the fix. Compared: the chat
templates (default and named), the vocabulary size, every special token (same text at the same id, CONTROL in
the GGUF) and every GGUF control token (special in the folder), bos id and whether a BOS is added, eos id, and the
stop ids (the folder's eos_token and generation_config.json's eos_token_id against the GGUF's eos/eot/eom ids).
What cannot be compared is a note, never a silent pass: a GGUF that does not set add_bos_token leaves it to
llama.cpp's default for the tokenizer model.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..tokenizer.folder import read_folder
from .reading import CONTROL, GgufTokenizer, read_gguf

FIX_INSTALL = "hf-chat-templates install FAMILY --gguf IN.gguf --output OUT.gguf (or --template FILE)"
# Tokens llama.cpp also treats as end of generation by their text (llama-vocab.cpp), whatever the metadata says.
LLAMA_CPP_EOG_TEXTS = frozenset(
    {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>"}
)


@dataclass(frozen=True)
class GgufDifference:
    what: str
    gguf: str
    folder: str
    fix: str

    def describe(self) -> str:
        return f"{self.what}: GGUF {self.gguf}; folder {self.folder}\n    to fix: {self.fix}"


@dataclass(frozen=True)
class GgufComparison:
    gguf: Path
    folder: Path
    differences: tuple[GgufDifference, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "gguf": str(self.gguf),
            "folder": str(self.folder),
            "ok": self.ok,
            "differences": [asdict(d) for d in self.differences],
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        head = f"{self.gguf} against {self.folder}: " + (
            "the same template, special tokens and stop ids" if self.ok else f"{len(self.differences)} difference(s)"
        )
        lines = [head] + [f"  {d.describe()}" for d in self.differences] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _template_side(text: str | None) -> str:
    if text is None:
        return "has none"
    return f"{len(text)} characters, sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _first_difference(a: str, b: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    line = a[:at].count("\n") + 1
    return f" (first difference at character {at}, line {line}: GGUF {a[at : at + 24]!r}, folder {b[at : at + 24]!r})"


def _templates(gguf: GgufTokenizer, folder: Any) -> list[GgufDifference]:
    found = []
    names = ["default", *sorted((set(gguf.named_templates) | set(folder.additional_templates)) - {"default"})]
    names += sorted(set(folder.config_templates()) - set(names))
    for name in names:
        ours = gguf.chat_template if name == "default" else gguf.named_templates.get(name)
        theirs = folder.named_template(name)
        if ours == theirs:
            continue
        key = "tokenizer.chat_template" + ("" if name == "default" else f".{name}")
        where = _first_difference(ours, theirs) if ours is not None and theirs is not None else ""
        found.append(
            GgufDifference(
                f"chat template {name!r} ({key})",
                _template_side(ours) + where,
                _template_side(theirs),
                f"write the folder's template into a new GGUF: {FIX_INSTALL}",
            )
        )
    return found


def _token_label(gguf: GgufTokenizer, token_id: int | None) -> str:
    if token_id is None:
        return "not set"
    text = gguf.token(token_id)
    return f"{token_id} ({text!r})" if text is not None else f"{token_id} (outside the vocabulary)"


def _special_tokens(gguf: GgufTokenizer, tok: Any) -> list[GgufDifference]:
    found = []
    special = {i: t.content for i, t in tok.added_tokens_decoder.items() if t.special}
    for token_id, text in sorted(special.items()):
        ours = gguf.token(token_id)
        if ours != text:
            found.append(
                GgufDifference(
                    f"special token {text!r} (id {token_id})",
                    f"has {ours!r} at id {token_id}" if ours is not None else f"has no id {token_id}",
                    f"{text!r} at id {token_id}",
                    "convert the model again from this folder (the vocabularies differ)",
                )
            )
        elif gguf.token_types[token_id] != CONTROL:
            found.append(
                GgufDifference(
                    f"special token {text!r} (id {token_id})",
                    f"type {gguf.token_type(token_id)}: llama.cpp splits it into pieces in text and prints it",
                    "special (one id, skipped when decoding)",
                    f"make it CONTROL in tokenizer.ggml.token_type: {FIX_INSTALL}",
                )
            )
    for text, token_id in sorted(gguf.control_tokens.items(), key=lambda kv: kv[1]):
        if token_id not in special:
            found.append(
                GgufDifference(
                    f"control token {text!r} (id {token_id})",
                    "CONTROL",
                    "not a special token" if text in tok.get_vocab() else "not in the vocabulary",
                    "register it as a special token in the folder, or convert the model again from it",
                )
            )
    return found


def _ids(gguf: GgufTokenizer, tok: Any, folder: Any) -> list[GgufDifference]:
    found = []
    if len(gguf.tokens) != len(tok):
        found.append(
            GgufDifference(
                "vocabulary size",
                f"{len(gguf.tokens)} tokens",
                f"{len(tok)} tokens",
                "convert the model again from this folder",
            )
        )
    for name, ours, theirs in (
        ("bos id", gguf.bos_token_id, tok.bos_token_id),
        ("eos id", gguf.eos_token_id, tok.eos_token_id),
    ):
        if theirs is not None and ours != theirs:
            found.append(
                GgufDifference(
                    f"{name} (tokenizer.ggml.{name.split()[0]}_token_id)",
                    _token_label(gguf, ours),
                    f"{theirs} ({tok.convert_ids_to_tokens(theirs)!r})",
                    f"set it to {theirs}: {FIX_INSTALL}",
                )
            )
    listed = (folder.generation_config or {}).get("eos_token_id")
    listed = listed if isinstance(listed, list) else [] if listed is None else [listed]
    folder_stops = list(dict.fromkeys(i for i in [tok.eos_token_id, *listed] if isinstance(i, int)))
    gguf_stops = list(gguf.stop_token_ids)
    for token_id in (i for i in folder_stops if i not in gguf_stops):
        by_text = gguf.token(token_id) in LLAMA_CPP_EOG_TEXTS
        found.append(
            GgufDifference(
                f"stop id {token_id} ({tok.convert_ids_to_tokens(token_id)!r})",
                "not its eos, eot or eom id"
                + (": recent llama.cpp stops on it by its text, other GGUF readers do not" if by_text else ""),
                "a stop id (eos_token or generation_config.json eos_token_id)",
                f"set tokenizer.ggml.eot_token_id to {token_id}: {FIX_INSTALL}",
            )
        )
    for token_id in (i for i in gguf_stops if i not in folder_stops):
        found.append(
            GgufDifference(
                f"stop id {_token_label(gguf, token_id)}",
                "an eos/eot/eom id: generation stops there",
                "not a stop id: the model was not trained to stop there",
                "add it to generation_config.json eos_token_id, or convert the model again from this folder",
            )
        )
    return found


def _add_bos(gguf: GgufTokenizer, tok: Any) -> tuple[list[GgufDifference], list[str]]:
    adds = tok.bos_token_id is not None and tok("a")["input_ids"][:1] == [tok.bos_token_id]
    if gguf.add_bos_token is None:
        return [], [
            f"the GGUF does not set tokenizer.ggml.add_bos_token: llama.cpp decides by tokenizer model "
            f"{gguf.model!r}; the folder {'adds' if adds else 'does not add'} a BOS"
        ]
    if gguf.add_bos_token == adds:
        return [], []
    return [
        GgufDifference(
            "add BOS (tokenizer.ggml.add_bos_token)",
            str(gguf.add_bos_token).lower(),
            f"tokenizer(text) {'adds' if adds else 'does not add'} a BOS",
            "set tokenizer.ggml.add_bos_token to match, or a prompt gets two BOS or none",
        )
    ], []


def compare_gguf(gguf: GgufTokenizer | str | Path, folder: str | Path) -> GgufComparison:
    """Compare a GGUF file (or what `read_gguf` read from it) with a tokenizer folder."""
    from transformers import AutoTokenizer

    gguf = gguf if isinstance(gguf, GgufTokenizer) else read_gguf(gguf)
    src = read_folder(folder)
    tok = AutoTokenizer.from_pretrained(str(src.path))
    bos, notes = _add_bos(gguf, tok)
    found = _templates(gguf, src) + _ids(gguf, tok, src) + bos + _special_tokens(gguf, tok)
    return GgufComparison(gguf.path, src.path, tuple(found), tuple(notes))
