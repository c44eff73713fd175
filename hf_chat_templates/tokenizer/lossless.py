"""Whether decoding a tokenizer's ids gives back the text, proven from its settings where it can be."""

from __future__ import annotations

from typing import Any

from .. import _compat

METASPACE_DECODER = [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0},
]


def lossless_unless(tokenizer: Any) -> str | None:
    """When decode(encode(text)) == text holds by construction, the one character that can break it ("" when
    none can); None when nothing is proven and every record must be decoded.

    Byte-level BPE (pre-tokenizer and decoder ByteLevel) is lossless for every text. SentencePiece-style Metaspace
    with byte fallback is lossless unless the text itself contains the word marker "▁", which decodes as a space.
    Both need no normalizer, no decode clean-up, and no added token that is normalized or strips whitespace."""
    backend = tokenizer.backend_tokenizer
    state = _compat.component_state  # each component serializes itself; the vocabulary is not read
    if backend.normalizer is not None or tokenizer.clean_up_tokenization_spaces:
        return None
    if any(t.normalized or t.lstrip or t.rstrip for t in tokenizer.added_tokens_decoder.values()):
        return None
    pre, decoder = state(backend.pre_tokenizer), state(backend.decoder)
    pres = pre.get("pretokenizers", [pre]) if pre else []
    if decoder.get("type") == "ByteLevel" and any(p.get("type") == "ByteLevel" for p in pres):
        return ""
    if (
        pre.get("type") == "Metaspace"
        and pre.get("replacement") == "\u2581"
        and pre.get("split") is False
        and pre.get("prepend_scheme") in ("first", "always")
        and decoder.get("decoders") == METASPACE_DECODER
    ):
        return "\u2581"
    return None


def byte_level_lossless(tokenizer: Any) -> bool:
    """True when decoding gives back every text, whatever it holds (byte-level BPE)."""
    return lossless_unless(tokenizer) == ""
