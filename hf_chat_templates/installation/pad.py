"""The pad token an install sets: the one asked for (checked), else the tokenizer's own, else one picked.

A pad token is masked out of the labels by id, so it must be in the vocabulary and be neither a stop token (the
model would never be trained to stop) nor a control token the template writes; a pad that is a stop token already
is kept with a warning that names `--pad-token`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import Any

from ..errors import UsageError, option
from ..tokenizer.vocab import Vocabulary, token_content
from .subject import InstallSubject

# Tried in order when a tokenizer has no pad token (after the family's own preferences).
GENERIC_PAD_TOKENS = ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>", "<|endoftext|>")


def pad_candidates(
    preferred: Iterable[str], unk: str | None, stops: Container[str], is_special: Callable[[str], bool]
) -> list[str]:
    """Special tokens that can pad, none a stop token: `preferred` (a family's own) first, then the usual pad
    tokens, then `unk`."""
    found = [
        candidate
        for candidate in (*preferred, *GENERIC_PAD_TOKENS, unk)
        if candidate and candidate not in stops and is_special(candidate)
    ]
    return list(dict.fromkeys(found))


def _pad_candidates(
    subject: InstallSubject, config: dict[str, Any], vocab: Vocabulary, eos: str, stops: tuple[str, ...]
) -> list[str]:
    """Special tokens of the vocabulary that can pad (none a stop token), the family's own first."""
    unk = token_content(config.get("unk_token")) or vocab.data["model"].get("unk_token")
    return pad_candidates(subject.pad_tokens, unk, {eos, *stops}, vocab.is_special)


def _requested_pad(
    requested: str, vocab: Vocabulary, eos: str, subject: InstallSubject, others: list[str]
) -> tuple[str, list[str]]:
    """The pad token asked for (`pad_token`), or UsageError: it must be in the vocabulary, and neither a stop token
    nor a control token the template writes (masked on pad, its every occurrence would go untrained)."""
    example = f" such as {others[0]}" if others else ""
    stops = subject.stop_tokens
    if vocab.id_of(requested) is None:
        raise UsageError(
            f"{option('pad_token')} {requested!r} is not in the vocabulary ({vocab.origin})",
            hint=f"pass a token the tokenizer has{example}; install never grows the vocabulary for a pad token",
            parameter="pad_token",
        )
    if requested == eos or requested in stops:
        raise UsageError(
            f"{option('pad_token')} {requested} is a stop token ({' '.join(dict.fromkeys((*stops, eos)))}): with "
            "labels masked on pad, the model is never trained to stop",
            hint=f"pass a token that is not a stop token{example}",
            parameter="pad_token",
        )
    if requested in subject.control_tokens:
        raise UsageError(
            f"{option('pad_token')} {requested} is a control token the template writes: with labels masked on "
            "pad, the model is never trained to write it",
            hint=f"pass a token the template does not write{example}",
            parameter="pad_token",
        )
    if vocab.is_special(requested):
        return requested, []
    return requested, [
        f"pad_token {requested} is not a special token: where the text holds it, masking by pad id masks it too"
        + (f"; a special token{example} is safer" if others else "")
    ]


def choose_pad(
    subject: InstallSubject,
    config: dict[str, Any],
    vocab: Vocabulary,
    eos: str,
    requested: str | None,
    warnings: list[str],
) -> str:
    """The pad token, with what to know about it added to `warnings`: the one asked for (`requested`; UsageError
    when it cannot pad), else the tokenizer's own, else the first that can pad (eos at worst)."""
    stops = subject.stop_tokens
    others = _pad_candidates(subject, config, vocab, eos, stops)
    if requested is not None:
        pad, notes = _requested_pad(requested, vocab, eos, subject, others)
        warnings += notes
        return pad
    current = token_content(config.get("pad_token"))
    example = f" (e.g. --pad-token {others[0]})" if others else ""
    if current is not None and vocab.id_of(current) is not None:
        if current == eos or current in stops:
            warnings.append(
                f"pad_token {current} is also a stop token: with labels masked on pad, the model is never "
                f"trained to stop; install keeps the tokenizer's pad: pass --pad-token TOKEN{example} to set a "
                "distinct one"
            )
        return current
    if others:
        return others[0]
    warnings.append(
        f"no pad token distinct from eos was found; pad_token is set to eos {eos}: mask padding by attention "
        "mask, not by token id, or pass --pad-token TOKEN with a special token that is not a stop token"
    )
    return eos
