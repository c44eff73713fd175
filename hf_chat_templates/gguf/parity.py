"""Token-level parity with llama.cpp's own tokenizer: the same conversation's ids from llama.cpp (the GGUF loaded
vocabulary-only through llama-cpp-python) and from transformers' `apply_chat_template`.

Each probe conversation is rendered once by transformers; llama.cpp tokenizes that text as its server does a
rendered prompt (special tokens parsed, a BOS added when the GGUF's add_bos_token says so) and the ids must be the
same. It needs the optional package llama-cpp-python (extra `llama-cpp`); without it the comparison is skipped and
the result says so, never a silent pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..conversations.probes import Probe
from .reading import GgufTokenizer

EXTRA = "llama-cpp"


@dataclass(frozen=True)
class ParityResult:
    ran: bool
    compared: int  # conversations compared
    mismatches: tuple[str, ...]  # one line each: probe, position, both tokens
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {"ran": self.ran, "compared": self.compared, "mismatches": list(self.mismatches), "note": self.note}

    def describe(self) -> str:
        if not self.ran:
            return f"llama.cpp token parity: skipped: {self.note}"
        if self.ok:
            return f"llama.cpp token parity: {self.compared} conversations, the same ids"
        return "llama.cpp token parity: " + "; ".join(self.mismatches)


def load_llama_vocab(gguf: GgufTokenizer) -> Any | None:
    """llama.cpp with the GGUF's vocabulary only, or None when llama-cpp-python is not installed."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.Llama(model_path=str(gguf.path), vocab_only=True, verbose=False)


def first_difference(ours: list[int], theirs: list[int]) -> int | None:
    """The first position where two id lists differ (the shorter one's length when one is a prefix), or None."""
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if at is None and len(ours) != len(theirs):
        at = min(len(ours), len(theirs))
    return at


def _mismatch(probe: Probe, tokenizer: Any, hf: list[int], cpp: list[int], at: int) -> str:
    def name(ids: list[int]) -> str:
        return repr(tokenizer.convert_ids_to_tokens(ids[at])) if at < len(ids) else "the end"

    return (
        f"{probe.id}: llama.cpp's id at position {at} is {cpp[at] if at < len(cpp) else None} ({name(cpp)}), "
        f"apply_chat_template's {hf[at] if at < len(hf) else None} ({name(hf)}); fix the GGUF's vocabulary or "
        "add_bos_token (hf-chat-templates verify FILE.gguf --against FOLDER names the difference)"
    )


def llama_cpp_parity(
    gguf: GgufTokenizer, tokenizer: Any, probes: Iterable[Probe], llama: Any | None = None
) -> ParityResult:
    """Compare llama.cpp's ids with `tokenizer.apply_chat_template`'s on each probe. `llama` is a loaded
    vocabulary (default: `load_llama_vocab(gguf)`)."""
    if llama is not None:
        return _compare(gguf, tokenizer, probes, llama)
    try:
        llama = load_llama_vocab(gguf)
    except Exception as err:  # llama.cpp refusing the file is the finding
        return ParityResult(True, 0, (f"llama.cpp cannot load the file's vocabulary ({type(err).__name__}: {err})",))
    if llama is None:
        return ParityResult(
            False, 0, (), f"llama-cpp-python is not installed (pip install 'hf-chat-templates[{EXTRA}]')"
        )
    try:
        return _compare(gguf, tokenizer, probes, llama)
    finally:
        if hasattr(llama, "close"):
            llama.close()


def _compare(gguf: GgufTokenizer, tokenizer: Any, probes: Iterable[Probe], llama: Any) -> ParityResult:
    mismatches, compared, refused = [], 0, []
    for probe in probes:
        try:
            text = tokenizer.apply_chat_template(
                probe.message_list(),
                tools=probe.tool_list(),
                add_generation_prompt=probe.add_generation_prompt,
                tokenize=False,
            )
            hf = list(
                tokenizer.apply_chat_template(
                    probe.message_list(),
                    tools=probe.tool_list(),
                    add_generation_prompt=probe.add_generation_prompt,
                    tokenize=True,
                    return_dict=False,
                )
            )
        except Exception:  # a probe the template refuses is `renders`' finding, not a parity one
            refused.append(probe.id)
            continue
        # add_bos=True lets llama.cpp add BOS as its vocabulary says (the file's add_bos_token, else its model
        # type's default), as llama-server does for a prompt
        cpp = list(llama.tokenize(text.encode("utf-8"), add_bos=True, special=True))
        compared += 1
        if (at := first_difference(hf, cpp)) is not None:
            mismatches.append(_mismatch(probe, tokenizer, hf, cpp, at))
    note = f"not compared, the template refuses them (see renders): {', '.join(refused)}" if refused else ""
    return ParityResult(True, compared, tuple(mismatches), note)
