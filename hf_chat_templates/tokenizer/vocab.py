"""Control-token registration on the parsed files of a tokenizer (pure: dicts in, dicts and a report out).

A control token must be one id, special, never normalized and never eating the whitespace around it. A token
already in the vocabulary is made so; a missing one is added after the last id (the model's embeddings must then
grow), or, when asked, written over an unused reserved slot so the vocabulary keeps its size.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import TokenizerFolderError

# Names of placeholder tokens that models reserve and never train on.
RESERVED_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"^<\|reserved_special_token_\d+\|>$",
        r"^<\|reserved_\d+\|>$",
        r"^<unused\d+>$",
        r"^<\|unused_?\d+\|>$",
        r"^<reserved_\d+>$",
        r"^\[control_\d+\]$",
    )
)
CONTROL_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
# Markup the model writes inside its turns (tool-call tags): one id, but kept by decoding, so parsers see it.
MARKUP_FLAGS = {**CONTROL_FLAGS, "special": False}


@dataclass(frozen=True)
class TokenChange:
    """What registration did to one token. action: unchanged | made-special | added | renamed-reserved |
    added-markup (a plain added token: one id, kept by decoding)."""

    token: str
    id: int
    action: str
    previous: str | None = None  # the reserved name it replaced, or the flags it had

    def describe(self) -> str:
        if self.action == "unchanged":
            return f"{self.token} = id {self.id}, already a special token"
        if self.action == "made-special":
            return f"{self.token} = id {self.id}, made special (was {self.previous})"
        if self.action == "renamed-reserved":
            return f"{self.token} = id {self.id}, written over unused slot {self.previous}"
        if self.action == "added-markup":
            return (
                f"{self.token} = id {self.id}, added as a plain token (tool-call markup: one id, kept by decoding; "
                "--control-token makes it special)"
            )
        return f"{self.token} = id {self.id}, added as a new special token"


def is_reserved(content: str) -> bool:
    return any(p.match(content) for p in RESERVED_PATTERNS)


class Vocabulary:
    """Lookups over a tokenizer.json dict: the model's vocabulary plus its added tokens."""

    def __init__(self, tokenizer_json: dict[str, Any], origin: str) -> None:
        self.data = tokenizer_json
        self.origin = origin
        model = tokenizer_json["model"]
        vocab = model.get("vocab")
        if isinstance(vocab, dict):
            self.model_ids: dict[str, int] = {k: int(v) for k, v in vocab.items()}
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            self.model_ids = {entry[0]: i for i, entry in enumerate(vocab)}
        else:
            raise TokenizerFolderError(
                f"{origin}: key 'model.vocab' is missing or of an unknown form", hint="restore the file"
            )
        self.added: dict[str, dict[str, Any]] = {}
        for i, entry in enumerate(tokenizer_json.get("added_tokens", [])):
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("content"), str)
                or not isinstance(entry.get("id"), int)
            ):
                raise TokenizerFolderError(
                    f"{origin}: added_tokens[{i}] lacks a string 'content' or an integer 'id'",
                    hint="restore the file",
                )
            if entry["content"] in self.added:
                raise TokenizerFolderError(
                    f"{origin}: added_tokens[{i}] {entry['content']!r} is listed twice", hint="restore the file"
                )
            model_id = self.model_ids.get(entry["content"])
            if model_id is not None and model_id != entry["id"]:
                raise TokenizerFolderError(
                    f"{origin}: added_tokens[{i}] {entry['content']!r} has id {entry['id']} but the model vocabulary "
                    f"gives it id {model_id}",
                    hint="restore the file; the two ids must agree",
                )
            self.added[entry["content"]] = entry
        self._check_added_ids()

    def _check_added_ids(self) -> None:
        """Added tokens beyond the model vocabulary must follow it without gaps: tokenizers renumbers them
        otherwise, so the ids written in the file are not the ids the tokenizer uses."""
        base = max(self.model_ids.values(), default=-1) + 1
        beyond = sorted(e["id"] for e in self.added.values() if e["id"] >= base)
        for expected, (found, entry) in enumerate(
            zip(beyond, sorted((e for e in self.added.values() if e["id"] >= base), key=lambda e: e["id"])),
            start=base,
        ):
            if found != expected:
                raise TokenizerFolderError(
                    f"{self.origin}: added token {entry['content']!r} has id {found}, but the ids after the model "
                    f"vocabulary ({base} entries) must be contiguous: {expected} is missing",
                    hint="restore the file; tokenizers would give this token another id than the file says",
                )

    @property
    def size(self) -> int:
        """Rows the embedding matrix needs: the largest id plus one."""
        ids = list(self.model_ids.values()) + [e["id"] for e in self.added.values()]
        return max(ids) + 1 if ids else 0

    def id_of(self, token: str) -> int | None:
        if token in self.added:
            return int(self.added[token]["id"])
        return self.model_ids.get(token)

    def is_special(self, token: str) -> bool:
        entry = self.added.get(token)
        return bool(entry and all(entry.get(k) == v for k, v in CONTROL_FLAGS.items()))


def _flags(entry: dict[str, Any]) -> str:
    return ", ".join(f"{k}={entry.get(k)}" for k in CONTROL_FLAGS if entry.get(k) != CONTROL_FLAGS[k])


def _rename_in_model(model: dict[str, Any], old: str, new: str) -> None:
    vocab = model.get("vocab")
    if isinstance(vocab, dict) and old in vocab:
        model["vocab"] = {(new if k == old else k): v for k, v in vocab.items()}
    elif isinstance(vocab, list):
        for entry in vocab:
            if entry[0] == old:
                entry[0] = new


def register_control_tokens(
    tokenizer_json: dict[str, Any],
    tokens: Iterable[str],
    *,
    reuse_reserved: bool,
    keep: Iterable[str] = (),
    origin: str = "tokenizer.json",
    markup: Iterable[str] = (),
) -> tuple[dict[str, Any], tuple[TokenChange, ...], list[str]]:
    """Return a registered copy of `tokenizer_json`, what happened to each token, and warnings.

    `keep` names tokens that must not be written over (bos, eos, pad, unk). `markup` tokens not yet added are
    added as plain tokens (one id, not special), after the control tokens."""
    data = copy.deepcopy(tokenizer_json)
    vocab = Vocabulary(data, origin)
    keep = set(keep)
    added_list: list[dict[str, Any]] = data.setdefault("added_tokens", [])
    wanted = list(tokens)
    free_slots = sorted(
        (e for c, e in vocab.added.items() if is_reserved(c) and c not in keep and c not in wanted),
        key=lambda e: e["id"],
    )
    changes, warnings = [], []
    next_id = vocab.size
    for token in wanted:
        entry = vocab.added.get(token)
        if entry is not None:
            if vocab.is_special(token):
                changes.append(TokenChange(token, entry["id"], "unchanged"))
            else:
                previous = _flags(entry)
                entry.update(CONTROL_FLAGS)
                changes.append(TokenChange(token, entry["id"], "made-special", previous))
            continue
        if token in vocab.model_ids:
            new = {"id": vocab.model_ids[token], "content": token, **CONTROL_FLAGS}
            added_list.append(new)
            vocab.added[token] = new
            changes.append(TokenChange(token, vocab.model_ids[token], "made-special", "a plain vocabulary piece"))
            continue
        if reuse_reserved and free_slots:
            slot = free_slots.pop(0)
            old = slot["content"]
            slot["content"] = token
            slot.update(CONTROL_FLAGS)
            _rename_in_model(data["model"], old, token)
            del vocab.added[old]
            vocab.added[token] = slot
            changes.append(TokenChange(token, slot["id"], "renamed-reserved", old))
            continue
        if reuse_reserved:
            warnings.append(f"no unused reserved slot left for {token}; it is added as a new token instead")
        new = {"id": next_id, "content": token, **CONTROL_FLAGS}
        added_list.append(new)
        vocab.added[token] = new
        changes.append(TokenChange(token, next_id, "added"))
        next_id += 1
    for token in dict.fromkeys(markup):
        if token in vocab.added or token in wanted:
            continue
        piece = vocab.model_ids.get(token)
        token_id = next_id if piece is None else int(piece)
        new = {"id": token_id, "content": token, **MARKUP_FLAGS}
        added_list.append(new)
        vocab.added[token] = new
        changes.append(TokenChange(token, token_id, "added-markup"))
        next_id += piece is None
    added_list.sort(key=lambda e: e["id"])
    return data, tuple(changes), warnings


def token_content(value: Any) -> str | None:
    """A special-token entry of tokenizer_config.json: a string, or an AddedToken dict with 'content'."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def with_content(previous: Any, content: str) -> Any:
    """Set a special-token entry to `content`, keeping its form (string or AddedToken dict)."""
    if isinstance(previous, dict):
        return {**previous, "content": content}
    return content


def sync_config_tokens(
    config: dict[str, Any], tokenizer_json: dict[str, Any], changes: Iterable[TokenChange]
) -> dict[str, Any]:
    """Carry token changes into tokenizer_config.json (or special_tokens_map.json): the added_tokens_decoder
    entries and any list of extra special tokens that names a renamed reserved slot."""
    config = copy.deepcopy(config)
    by_id = {e["id"]: e for e in tokenizer_json.get("added_tokens", [])}
    changed = [c for c in changes if c.action != "unchanged"]
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for change in changed:
            entry = by_id[change.id]
            decoder[str(change.id)] = {k: entry[k] for k in ("content", *CONTROL_FLAGS) if k in entry}
        config["added_tokens_decoder"] = dict(sorted(decoder.items(), key=lambda kv: int(kv[0])))
    renames = {c.previous: c.token for c in changed if c.action == "renamed-reserved"}
    for key in ("extra_special_tokens", "additional_special_tokens"):
        values = config.get(key)
        if isinstance(values, list):
            config[key] = [
                with_content(v, renames[token_content(v)]) if token_content(v) in renames else v for v in values
            ]
    return config


def post_processor_adds(tokenizer_json: dict[str, Any], token: str) -> bool:
    """Whether the TemplateProcessing post-processor (nested Sequence processors too) adds `token` to a single
    text: what `tokenizer(text)` does with its defaults."""

    def adds(proc: Any) -> bool:
        if not isinstance(proc, dict):
            return False
        if proc.get("type") == "Sequence":
            return any(adds(p) for p in proc.get("processors", []))
        return proc.get("type") == "TemplateProcessing" and any(
            isinstance(i, dict) and i.get("SpecialToken", {}).get("id") == token for i in proc.get("single", [])
        )

    return adds(tokenizer_json.get("post_processor"))


def drop_post_processor_token(tokenizer_json: dict[str, Any], token: str) -> tuple[dict[str, Any], bool]:
    """A copy of `tokenizer_json` whose TemplateProcessing post-processor no longer adds `token` (the BOS a
    template already writes); and whether anything was dropped. Nested Sequence processors are searched too."""
    data = copy.deepcopy(tokenizer_json)
    dropped = False

    def strip(proc: Any) -> Any:
        nonlocal dropped
        if not isinstance(proc, dict):
            return proc
        if proc.get("type") == "Sequence":
            proc["processors"] = [strip(p) for p in proc.get("processors", [])]
        elif proc.get("type") == "TemplateProcessing":
            for key in ("single", "pair"):
                items = proc.get(key, [])
                kept = [i for i in items if not (isinstance(i, dict) and i.get("SpecialToken", {}).get("id") == token)]
                if len(kept) != len(items):
                    dropped = True
                    proc[key] = kept
            used = {i["SpecialToken"]["id"] for k in ("single", "pair") for i in proc.get(k, []) if "SpecialToken" in i}
            proc["special_tokens"] = {k: v for k, v in proc.get("special_tokens", {}).items() if k in used}
        return proc

    data["post_processor"] = strip(data.get("post_processor"))
    return data, dropped
