"""tiktoken as the encoder of a byte-level BPE tokenizer whose merges are its vocabulary's ranks (Llama 3's, GPT-2's
and others converted from tiktoken), where it gives exactly the tokenizer's ids: about twice as fast as `tokenizers`.

tiktoken merges, among the adjacent pairs of a pre-tokenized piece, the one whose concatenation has the lowest rank;
`tokenizers`' BPE merges the pair listed first in `merges`. The two agree when the ranks are the ids and the merges
are every split of every token into two tokens, listed in the order of the merged token's id (what tiktoken's own
converter writes), and both take a piece that is a whole token as it is (`ignore_merges`). That is proven on the
tokenizer's vocabulary and merges (about a second for 128k tokens, so the verdict is kept in the cache folder, keyed
by the model's hash), along with what else must hold: no normalizer, a Split regex then ByteLevel (or ByteLevel's
own regex), no offset trimming, added tokens that split the text as tiktoken's special tokens do. The regex runs in
another engine (fancy-regex, not Oniguruma), so `prepare` still compares the first records both ways before it uses
it (`segments.SegmentEncoder`), and says which encoder ran in its report.

What the features read of an encoding (`char_to_token`, `offsets`) comes from the tokens' byte lengths: a token
covers the characters its bytes belong to, as `tokenizers` reports a byte-level token's offsets.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import json
import marshal
import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import _compat
from ..tokenizer.cache_folder import cache_file, keep, read_kept

SWITCH = "HF_CHAT_TEMPLATES_TIKTOKEN"  # 0: the tokenizer's own encoder always
# GPT-2's pre-tokenizer regex: what ByteLevel(use_regex=True) splits with
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_decoder() -> dict[str, int]:
    """ByteLevel's alphabet: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes)}


def _pattern(pre_tokenizer: dict[str, Any]) -> tuple[str | None, str]:
    """The split regex tiktoken would run, or None and why the pre-tokenizer is not one it can."""
    parts = pre_tokenizer.get("pretokenizers") if pre_tokenizer.get("type") == "Sequence" else [pre_tokenizer]
    parts = parts or []
    last = parts[-1] if parts else {}
    if last.get("type") != "ByteLevel" or last.get("add_prefix_space"):
        return None, "the pre-tokenizer does not end in ByteLevel without a prefix space"
    if len(parts) == 1 and last.get("use_regex", True):
        return GPT2_PATTERN, ""
    split = parts[0]
    if (
        len(parts) != 2
        or last.get("use_regex", True)
        or split.get("type") != "Split"
        or split.get("behavior") != "Isolated"
        or split.get("invert")
        or "Regex" not in split.get("pattern", {})
    ):
        return None, "the pre-tokenizer is not one Split regex then ByteLevel"
    return split["pattern"]["Regex"], ""


def static_reason(backend: Any) -> str:
    """Why tiktoken cannot stand for this tokenizer, read from its components (the merges are proven apart), or ""."""
    if getattr(backend, "encode_special_tokens", False):
        return "the tokenizer encodes special tokens as text"
    if backend.normalizer is not None:
        return "the tokenizer has a normalizer"
    _, why = _pattern(_compat.component_state(backend.pre_tokenizer))
    if why:
        return why
    if '"trim_offsets": true' in json.dumps(_compat.component_state(backend.post_processor)):
        return "the post-processor trims offsets"
    added = list(backend.get_added_tokens_decoder().values())
    if any(t.normalized or t.lstrip or t.rstrip or t.single_word for t in added):
        return "an added token is normalized, stripped or single-word"
    contents = sorted(t.content for t in added)
    if any(b.startswith(a) for a, b in itertools.pairwise(contents)):
        return "an added token begins another"
    return ""


def merges_reason(model: dict[str, Any]) -> str:
    """Why BPE with these merges differs from rank-ordered merging of the vocabulary, or "" when it cannot."""
    if model.get("type") != "BPE":
        return f"the model is {model.get('type')}, not BPE"
    if model.get("dropout") or model.get("byte_fallback") or not model.get("ignore_merges"):
        return "the BPE model has dropout, byte fallback, or merges applied to whole tokens (ignore_merges off)"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "the BPE model writes subword prefixes or suffixes"
    vocab: dict[str, int] = model["vocab"]
    if any(c not in vocab for c in byte_decoder()):
        return "a byte has no token of its own"
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    last = -1
    for a, b in merges:
        merged = vocab.get(a + b)
        if merged is None or a not in vocab or b not in vocab or merged < last:
            return f"merge {a!r} {b!r} is not in the order of the merged token's id"
        last = merged
    listed = set(merges)
    splits = 0
    for token in vocab:
        for k in range(1, len(token)):
            if token[:k] in vocab and token[k:] in vocab:
                splits += 1
                if (token[:k], token[k:]) not in listed:
                    return f"{token!r} splits into {token[:k]!r} {token[k:]!r}, which the merges do not list"
    return "" if splits == len(listed) else "the merges list a pair twice"


@lru_cache(maxsize=1)
def _code_version() -> str:
    """The hash of this module's code, in the key of its records: a change to how merges are proven or ranks
    made proves and makes them again."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _proof(backend: Any, source: Path | None) -> tuple[str, Path | None]:
    """`merges_reason` for the backend's model, from the cache folder when proven before, and the path (without
    its suffix) of the records kept for that model, None when the cache folder cannot be named. The key is the
    hash of the `source` file the backend was loaded from (hashing it is ten times cheaper than serializing the
    model), or of the serialized model, the tokenizers version that loaded it, and this module's code."""
    import tokenizers

    state: bytes | None = None
    if source is not None:
        key = f"file-{hashlib.sha256(source.read_bytes()).hexdigest()}"
    else:
        state = _compat.model_state(backend.model)
        key = hashlib.sha256(state).hexdigest()
    stem = cache_file("bpe-proofs", f"{key}-tokenizers-{tokenizers.__version__}-{_code_version()}")
    if stem is not None:
        try:
            return str(json.loads(read_kept(stem.with_name(stem.name + ".json")) or b"")["reason"]), stem
        except (ValueError, KeyError, TypeError):
            pass
    collecting = gc.isenabled()
    gc.disable()  # hundreds of thousands of lists, none in a cycle: the collector would walk them for nothing
    try:
        reason = merges_reason(json.loads(state if state is not None else _compat.model_state(backend.model)))
    finally:
        if collecting:
            gc.enable()
    if stem is not None:
        keep(stem.with_name(stem.name + ".json"), json.dumps({"reason": reason}).encode())
    return reason, stem


def _ranks(backend: Any, vocab: dict[str, int] | None, record: Path | None) -> dict[bytes, int]:
    """tiktoken's ranks for the backend's model: each token's bytes and its id. Read from the `record` kept in
    an earlier run for the same model (0.02 s against 0.2 s to ask for the vocabulary and translate it) when it
    is what was written (`read_kept`) and holds one rank per token, else made and kept there."""
    kept = read_kept(record) if record is not None else None
    if kept is not None:
        with contextlib.suppress(ValueError, EOFError, TypeError):
            ranks = marshal.loads(kept)
            if isinstance(ranks, dict) and len(ranks) == backend.get_vocab_size(with_added_tokens=False):
                return ranks
    # each character of a token's spelling stands for one byte: translated to the latin-1 character of that
    # byte, the spelling encodes to the token's bytes
    latin1 = str.maketrans({c: chr(b) for c, b in byte_decoder().items()})
    vocab = vocab if vocab is not None else backend.get_vocab(with_added_tokens=False)
    ranks = {token.translate(latin1).encode("latin-1"): i for token, i in vocab.items()}
    if record is not None:
        keep(record, marshal.dumps(ranks))
    return ranks


class ByteEncoding:
    """ids (an int32 array) of `text`, with `char_to_token` and `offsets` from the tokens' byte lengths: a token
    covers each character one of its bytes belongs to; a character's token is the one holding its first byte."""

    __slots__ = ("_chars", "_ends", "_lengths", "ids", "text")

    def __init__(self, text: str, ids: Any, lengths: Any) -> None:
        self.text, self.ids, self._lengths = text, ids, lengths
        self._ends: Any = None
        self._chars: Any = None  # the first byte of each character, for text that is not ASCII

    def __len__(self) -> int:
        return len(self.ids)

    def _byte_ends(self) -> Any:
        import numpy as np

        if self._ends is None:
            self._ends = np.cumsum(self._lengths[self.ids])
        return self._ends

    def _char_starts(self) -> Any:
        import numpy as np

        if self._chars is None:
            data = np.frombuffer(self.text.encode("utf-8"), np.uint8)
            self._chars = np.flatnonzero((data & 0xC0) != 0x80)
        return self._chars

    def _bytes_at(self, chars: list[int]) -> list[int]:
        """The byte offset of each character: the text's UTF-8 length up to it, counted between the characters in
        their order (a few per text, so cheaper than an index of every character)."""
        text, char, byte, at = self.text, 0, 0, {}
        for c in sorted(set(chars)):
            byte += len(text[char:c].encode("utf-8"))
            char, at[c] = c, byte
        return [at[c] for c in chars]

    def char_to_token(self, char: int) -> int | None:
        import numpy as np

        if not 0 <= char < len(self.text):
            return None
        at = char if self.text.isascii() else int(self._char_starts()[char])
        return int(np.searchsorted(self._byte_ends(), at, side="right"))

    def tokens_at(self, chars: list[int]) -> list[int | None]:
        """`char_to_token` of each character, in one search."""
        import numpy as np

        inside = [0 <= c < len(self.text) for c in chars]
        at = [c if ok else 0 for c, ok in zip(chars, inside)]
        if not self.text.isascii():
            at = self._bytes_at(at)
        found = np.searchsorted(self._byte_ends(), at, side="right").tolist()
        return [t if ok else None for t, ok in zip(found, inside)]

    @property
    def offsets(self) -> list[tuple[int, int]]:
        import numpy as np

        ends = self._byte_ends()
        starts = ends - self._lengths[self.ids]
        if self.text.isascii():
            return list(zip(starts.tolist(), ends.tolist()))
        char_of_byte = np.zeros(int(ends[-1]) if len(ends) else 0, np.int64)
        char_of_byte[self._char_starts()] = 1
        char_of_byte = np.cumsum(char_of_byte) - 1
        return list(zip(char_of_byte[starts].tolist(), (char_of_byte[ends - 1] + 1).tolist()))


def tokens_at_batch(encodings: list[Any], chars: list[list[int]]) -> list[list[int | None]] | None:
    """`ByteEncoding.tokens_at` of each encoding's characters, in one search over the whole batch (one numpy call
    per batch instead of a few per record); None unless every encoding is a ByteEncoding of the same engine. Every
    token has at least one byte, so record r's byte b, counted from the bytes before it, falls among its own tokens."""
    import numpy as np

    if not encodings or any(type(e) is not ByteEncoding for e in encodings):
        return None
    lengths = encodings[0]._lengths
    if any(e._lengths is not lengths for e in encodings):
        return None
    counts = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    token_base = np.zeros(len(encodings) + 1, np.int64)
    np.cumsum(counts, out=token_base[1:])
    ends = np.zeros(int(token_base[-1]) + 1, np.int64)  # ends[t + 1]: the batch's bytes up to token t, inclusive
    np.cumsum(lengths[np.concatenate([e.ids for e in encodings])], out=ends[1:])
    byte_base = ends[token_base[:-1]].tolist()
    inside, at = [], []
    for e, wanted, base in zip(encodings, chars, byte_base):
        n = len(e.text)
        ok = [0 <= c < n for c in wanted]
        where = [c if good else 0 for c, good in zip(wanted, ok)]
        inside.append(ok)
        at += [base + b for b in (where if e.text.isascii() else e._bytes_at(where))]
    found = (np.searchsorted(ends[1:], at, side="right") if at else np.zeros(0, np.int64)).tolist()
    out, k = [], 0
    for ok, first in zip(inside, token_base[:-1].tolist()):
        out.append([t - first if good else None for t, good in zip(found[k : k + len(ok)], ok)])
        k += len(ok)
    return out


class BpeEngine:
    """A tiktoken `Encoding` with the tokenizer's ranks, and the byte length of every id."""

    def __init__(
        self, backend: Any, pattern: str, vocab: dict[str, int] | None = None, ranks_record: Path | None = None
    ) -> None:
        """`vocab`: the model's vocabulary (tokenizer.json's `model.vocab`) when the caller has it parsed already;
        `ranks_record`: where the ranks made from it are kept between runs (`_ranks`)."""
        import numpy as np
        import tiktoken

        ranks = _ranks(backend, vocab, ranks_record)
        added = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
        self.encoding = tiktoken.Encoding("tokenizer", pat_str=pattern, mergeable_ranks=ranks, special_tokens=added)
        lengths = np.zeros(max([*ranks.values(), *added.values()]) + 1, np.int64)
        lengths[np.fromiter(ranks.values(), np.int64, len(ranks))] = np.fromiter(map(len, ranks), np.int64, len(ranks))
        for content, i in added.items():
            lengths[i] = len(content.encode("utf-8"))
        self.lengths = lengths
        self.added = frozenset(added)
        self.separator = separator(added, ranks)
        self.threads = os.cpu_count() or 1
        self._pool: ThreadPoolExecutor | None = None

    def encode_batch(self, texts: list[str], *, specials: bool) -> list[ByteEncoding]:
        """Each text encoded: added tokens split out as the tokenizer does when `specials`, else all text. The
        texts are cut into one run per thread, each encoded in one call (`_encode_joined`) without the GIL."""
        step = -(-len(texts) // self.threads)
        if self.threads == 1 or len(texts) < 2 * self.threads:
            return self._encode_joined(texts, specials)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tiktoken")
        runs = [texts[k : k + step] for k in range(0, len(texts), step)]
        return [e for run in self._pool.map(self._encode_joined, runs, [specials] * len(runs)) for e in run]

    def _encode_joined(self, texts: list[str], specials: bool) -> list[ByteEncoding]:
        """The texts in one call to tiktoken, joined by the separator token and cut at its ids (a call per text
        costs as much again, the added tokens handed over each time, and holds the GIL in between); a text that
        holds the separator itself is encoded alone."""
        import numpy as np

        if self.separator is None or len(texts) < 2:
            return [self._encode_one(t, specials) for t in texts]
        sep, sep_id = self.separator
        spelled = {k for k, t in enumerate(texts) if sep in t}
        joined = [t for k, t in enumerate(texts) if k not in spelled]
        allowed = self.added if specials else frozenset((sep,))
        ids = self.encoding.encode_to_numpy(sep.join(joined), allowed_special=allowed, disallowed_special=())
        cuts = np.flatnonzero(ids == sep_id)
        if len(cuts) != len(joined) - 1:  # not seen: `separator` rules it out
            return [self._encode_one(t, specials) for t in texts]
        ids = ids.view(np.int32)
        starts, ends = [0, *(cuts + 1).tolist()], [*cuts.tolist(), len(ids)]
        cut = iter([ByteEncoding(t, ids[a:b].copy(), self.lengths) for t, a, b in zip(joined, starts, ends)])
        return [self._encode_one(t, specials) if k in spelled else next(cut) for k, t in enumerate(texts)]

    def _encode_one(self, text: str, specials: bool) -> ByteEncoding:
        import numpy as np

        allowed = self.added if specials else frozenset()
        return ByteEncoding(
            text,
            self.encoding.encode_to_numpy(text, allowed_special=allowed, disallowed_special=()).view(np.int32),
            self.lengths,
        )


def separator(added: dict[str, int], ranks: dict[bytes, int]) -> tuple[str, int] | None:
    """An added token that joins texts into one call to tiktoken without changing any text's tokens: no added token
    holds its first character but at the start (so none matches across the end of a text into it), none other
    begins with it or is a prefix of it (so it is matched whole), and its id is no merged token's. The one with
    a reserved one (a template writes the others, a model's newest token may be its tool-call tag) of the highest id
    among the last 64; None if none of them qualifies."""
    inner = {c for token in added for c in token[1:]}
    ids = set(ranks.values())
    last = sorted(added.items(), key=lambda item: -item[1])[:64]
    for content, i in sorted(last, key=lambda item: "reserved" not in item[0].lower()):
        if (
            content
            and content[0] not in inner
            and i not in ids
            and not any(t != content and (t.startswith(content) or content.startswith(t)) for t in added)
        ):
            return content, i
    return None


def load(backend: Any, source: Path | None = None, vocab: dict[str, int] | None = None) -> tuple[BpeEngine | None, str]:
    """tiktoken standing for `backend` (loaded from the `source` file, whose model's `vocab` the caller may have
    parsed already), or None and why not (said in `prepare`'s report)."""
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        return None, "tiktoken is not installed (pip install tiktoken: about twice as fast on byte-level BPE)"
    reason, stem = static_reason(backend), None
    if not reason:
        reason, stem = _proof(backend, source)
    if reason:
        return None, reason
    pattern, _ = _pattern(_compat.component_state(backend.pre_tokenizer))
    assert pattern is not None
    ranks_record = stem.with_name(stem.name + ".ranks") if stem is not None else None
    return BpeEngine(backend, pattern, vocab if source is not None else None, ranks_record), ""


def describe_encoder(off: str) -> str:
    """The report's line: tiktoken, or the tokenizer's own encoder and why."""
    if not off:
        return "tiktoken (proven to give the tokenizer's ids: byte-level BPE whose merges follow its ranks)"
    return f"the tokenizer's own (not tiktoken: {off})"
