"""What every check reads: the tokenizer, the template, its tokens, the probes and their renderings, computed once
and shared (each probe is rendered once, tokenized once, its message boundaries found once)."""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ..conversations.probes import CAPABILITIES, Probe, Sentinel, id_format_for
from ..conversations.suite import build_probes
from ..families.registry import Variant
from ..families.tokens import TemplateTokens, inferred_control_tokens, surviving_texts, template_tokens
from ..template.analysis import unregistered_role_markers
from ..template.engines.registry import engine_names
from ..template.rendering import Rendered, Renderer
from ..template.spans import TurnSpans, assistant_spans
from ..tokenizer.folder import GENERATION_CONFIG, TokenizerFolder
from .results import Finding, around, first_difference, visible

# `install --gguf` refuses these options: a fix for a GGUF file leaves them out.
GGUF_REFUSED = ("--format", "--training")
# Where a GGUF file keeps what a folder's generation_config.json says.
GGUF_KEYS = {
    "eos_token_id": "the GGUF's stop ids (tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id)",
    "bos_token_id": "tokenizer.ggml.bos_token_id",
    "pad_token_id": "tokenizer.ggml.padding_token_id",
}
# Two moments far apart: a rendering that differs between them reads the clock.
CLOCKS = (dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(2031, 12, 30, 23, 58, 59))
# The one moment every rendering of a verify run sees (the engines', the official renderers' and the goldens' too):
# a template that prints the time renders the same text in every check, however long the run takes.
VERIFY_CLOCK = CLOCKS[0]


@dataclass(frozen=True)
class RecordContext:
    """What a per-record check reads: one dataset record, its rendering, the rendering's ids (encoded once), the
    decoded text (or the rendering itself where the tokenizer is proven lossless), and the BOS count of the
    rendering's own ids."""

    record: dict[str, Any]
    text: str
    ids: list[int]
    decoded: str
    bos_count: int
    control_tokens: tuple[str, ...]

    def strings(self) -> list[tuple[int, str]]:
        """(message index, string) for every non-blank content string, text part and tool-call name."""
        found = []
        for i, m in enumerate(self.record["messages"]):
            content = m.get("content")
            if isinstance(content, str) and content.strip():
                found.append((i, content.strip()))
            elif isinstance(content, list):
                found += [
                    (i, p["text"].strip())
                    for p in content
                    if isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"].strip()
                ]
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call) if isinstance(call, dict) else {}
                if isinstance(fn.get("name"), str):
                    found.append((i, fn["name"]))
        return found


def _shows(probe: Probe, s: Sentinel, text: str) -> bool:
    """Whether `text` shows the sentinel as what it stands for. A tool-call name counts only where it occurs more
    often than the tool definitions name it: a template that lists tools and drops the calls shows it once."""
    if s.kind != "tool_name":
        return s.text in text
    definitions = sum(1 for tool in probe.tools or () if s.text in str(tool))
    return text.count(s.text) > definitions


class VerifyContext:
    """What every check reads: the tokenizer, the template, its tokens, the probes and their renderings."""

    def __init__(
        self,
        tokenizer: Any,
        template: str,
        *,
        folder: TokenizerFolder | None = None,
        variant: Variant | None = None,
        kwargs: dict[str, Any] | None = None,
        probes: Iterable[Probe] | None = None,
        stop_tokens: Iterable[str] | None = None,
        control_tokens: Iterable[str] | None = None,
        tool_template: str | None = None,
        training: bool = False,
        sanitize: bool = False,
        engines: Iterable[str] | str | None = None,
        data_fields: dict[str, int] | None = None,
        gguf: Path | None = None,
    ) -> None:
        """`stop_tokens` and `control_tokens` are the caller's declarations: declared stops replace the family's or
        inferred ones; declared control tokens come first, before the family's and the inferred ones.
        `tool_template` is the folder's named `tool_use` template: probes with tools are rendered with it, as
        transformers renders a conversation given tools. `training`: the template will be trained on, so data it
        never reads is lost (a failure, not a warning). `sanitize`: the caller renders untrusted content with
        sanitize_control_tokens=True, so content that still becomes a control token is a failure.
        `engines`: the engine profiles `engine-parity` compares with transformers (default: every one; an unknown
        name raises UsageError). `data_fields`: what the data to train on carries (records per field: system,
        tools, tool_calls, tool_results, reasoning), when known: a field the template never reads and the data never
        has loses nothing. `gguf`: the GGUF file the folder was saved from (`verify FILE.gguf`): fixes name it."""
        self.tokenizer = tokenizer
        self.declared_stops = tuple(stop_tokens) if stop_tokens is not None else None
        self.declared_controls = tuple(control_tokens or ())
        self.template = template
        self.folder = folder
        self.variant = variant
        self.kwargs = dict(kwargs if kwargs is not None else (variant.kwarg_defaults if variant else {}))
        self.tool_template = tool_template
        self.renderer = Renderer(tokenizer, template, self.kwargs, tool_template=tool_template, clock=VERIFY_CLOCK)
        self.training = training
        self.sanitize = sanitize
        self.engines = engine_names(engines)
        self.data_fields = data_fields
        self.gguf = gguf
        self.id_format = id_format_for(template + (tool_template or ""))
        self.probes = tuple(probes if probes is not None else build_probes(self.id_format))
        # engine-parity's renderings begun before the checks run (`checks.engines.begin`), by profile name
        self.begun_engines: dict[str, tuple[Any, Callable[[], dict[str, Rendered]]]] = {}
        # reference-parity's ids begun before the checks run (`references.begin`): by probe id, what the worker gave
        self.begun_references: Callable[[], dict[str, Any]] | None = None
        # what a check computes once for others to read (`format_history`: the official format the template follows)
        self.cache: dict[str, Any] = {}
        self._probe_ids: dict[str, list[int]] = {}
        self._boundaries: dict[str, list[int] | None] = {}
        self._token_ids: dict[str, int | None] = {}

    # ---- renderings -----------------------------------------------------------------------------------------
    def render(self, probe: Probe, **override: Any) -> Rendered:
        flags = {
            "add_generation_prompt": probe.add_generation_prompt,
            "continue_final_message": probe.continue_final_message,
            **override,
        }
        return self.renderer.render(probe.message_list(), probe.tool_list(), **flags)

    @cached_property
    def rendered(self) -> dict[str, Rendered]:
        return {p.id: self.render(p) for p in self.probes}

    def snapshot(self, probe: Probe, k: int) -> Rendered:
        """What an agent sends before the model writes message k: messages[:k] with a generation prompt (the
        renderer caches it: the checks that read it render it once)."""
        return self.renderer.render(probe.message_list()[:k], probe.tool_list(), add_generation_prompt=True)

    def probe(self, probe_id: str) -> Probe:
        return next(p for p in self.probes if p.id == probe_id)

    @cached_property
    def capabilities(self) -> dict[str, str]:
        """yes / no / error, per capability: yes when its sentinels survive some rendering, a probe's training
        rendering or, failing those, the request an agent sends at one of its generation points (a template that
        writes the system prompt only before a generation prompt reads it: dropping it elsewhere is data loss)."""
        found: dict[str, str] = {}
        for capability in CAPABILITIES:
            outcomes = []
            for p in self.probes:
                sentinels = [s for s in p.sentinels if s.needs == capability]
                if not sentinels:
                    continue
                r = self.rendered[p.id]
                if not r.ok:
                    outcomes.append(f"error in probe {p.id}: {r.error}")
                elif any(_shows(p, s, r.text or "") for s in sentinels):
                    outcomes.append("yes")
                else:
                    outcomes.append("no")
            if "yes" not in outcomes and self._read_in_requests(capability):
                outcomes.append("yes")
            # A probe that renders and drops the capability outweighs probes that do not render at all.
            found[capability] = (
                "yes" if "yes" in outcomes else "no" if "no" in outcomes else outcomes[0] if outcomes else "untested"
            )
        return found

    def _read_in_requests(self, capability: str) -> bool:
        """Whether a request an agent sends (a probe's prefix with a generation prompt) shows the capability."""
        for p in self.probes:
            for k in p.generation_points:
                sentinels = [s for s in p.sentinels if s.needs == capability and (s.message is None or s.message < k)]
                if not sentinels:
                    continue
                r = self.snapshot(p, k)
                if r.ok and any(_shows(p, s, r.text or "") for s in sentinels):
                    return True
        return False

    def applicable(self, probe: Probe) -> bool:
        return all(self.capabilities.get(c) == "yes" for c in probe.requires)

    # ---- tokens ---------------------------------------------------------------------------------------------
    @cached_property
    def added_tokens(self) -> dict[str, Any]:
        return {t.content: t for t in self.tokenizer.added_tokens_decoder.values()}

    @cached_property
    def tokens(self) -> TemplateTokens:
        """Declared by the caller, else the family's, else inferred from the renderings and the folder's
        generation stops (`generation_config.json`, else the tokenizer's eos), with where they came from."""
        return template_tokens(
            self.tokenizer,
            self.template,
            kwargs=self.kwargs,
            variant=self.variant,
            stop_tokens=self.declared_stops,
            control_tokens=self.declared_controls,
            generation_config=self.folder.generation_config if self.folder is not None else None,
            renderings=self.inference_texts,
            probes=self.probes,
        )

    @cached_property
    def control_tokens(self) -> tuple[str, ...]:
        """Declared by the caller, then by the family, plus every control token the template writes: in
        control-token shapes, registered special tokens, and structural fragments of any shape."""
        return inferred_control_tokens(self.renderer, self.inference_texts, self.probes, self.tokens.control_tokens)

    @cached_property
    def role_markers(self) -> dict[str, str]:
        """Control-token-shaped strings the template builds from a role its format does not have, unregistered and
        undeclared, by role (ChatGLM3's `<|tool|>`): not control tokens (`unregistered_role_markers`)."""
        roles = {str(m.get("role")) for p in self.probes for m in p.messages}
        found = unregistered_role_markers(self.template, self.inference_texts, roles, self.added_tokens)
        declared = {*self.declared_controls, *(self.declared_stops or ())}
        return {t: r for t, r in found.items() if t not in declared and t not in self.control_tokens}

    @cached_property
    def inference_texts(self) -> list[str]:
        """The probes' renderings token inference reads: a probe that raises is rendered again as it would be sent
        otherwise (None contents as "", arguments as JSON strings), so a crash hides none of the tokens."""
        return surviving_texts(self.renderer, self.probes, self.rendered)

    @property
    def markup_tokens(self) -> tuple[str, ...]:
        """Tool-call and reasoning tags the template writes (`<tool_call>`): each must be one id, special or not."""
        return tuple(t for t in self.tokens.markup_tokens if t not in self.control_tokens)

    @property
    def stop_tokens(self) -> tuple[str, ...]:
        """Declared by the caller, else by the family; otherwise the token written after every answer (the
        folder's generation stops first), a tool-call turn's own, or the next turn's token the folder stops on."""
        return self.tokens.stop_tokens

    def install_command(self, options: str = "") -> str:
        """The install command that fixes this folder: the family's for a bundled template, else the template
        file's, with `options` (`--training`, `--format both`, `--stop-token TOKEN`) before the output. For a GGUF
        file, the install into a new GGUF file (its own template when that is the one verified; the options a GGUF
        install refuses left out)."""
        what = (
            f"{self.variant.family} --variant {self.variant.name}"
            if self.variant is not None
            else "--template TEMPLATE.jinja"
        )
        if self.gguf is not None:
            saved = self.folder.named_template("default") if self.folder is not None else None
            own = self.variant is None and self.template == saved
            kept = [o for o in re.split(r" (?=--)", options) if o and not o.startswith(GGUF_REFUSED)]
            parts = ["hf-chat-templates install", *([] if own else [what]), "--gguf", shlex.quote(str(self.gguf))]
            return " ".join([*parts, *kept, "--output FIXED.gguf"])
        source = str(self.folder.path) if self.folder is not None else "SRC"
        return f"hf-chat-templates install {what} --tokenizer {source}{' ' + options if options else ''} --output DIR"

    def generation_key(self, key: str) -> str:
        """Where a generation setting (eos_token_id, bos_token_id, pad_token_id) is read from, in words: the
        folder's generation_config.json, or a GGUF file's metadata."""
        if self.gguf is None:
            return f"{GENERATION_CONFIG} {key}"
        return GGUF_KEYS.get(key, f"the GGUF's {key}")

    def missing_turn_end(self) -> str | None:
        """Why a turn's end cannot be trained, or None: no stop token is known, or no token ends a turn (the
        stops, if any, are the next turn's tokens)."""
        if self.stop_tokens and self.tokens.turn_end:
            return None
        return "; ".join(self.tokens.notes) or "no stop token is known for this template"

    def token_id(self, token: str) -> int | None:
        """The one id `token` encodes to, or None (encoded once per token: the mask checks ask for each span)."""
        if token not in self._token_ids:
            ids = self.tokenizer.encode(token, add_special_tokens=False)
            self._token_ids[token] = ids[0] if len(ids) == 1 else None
        return self._token_ids[token]

    def pieces(self, ids: list[int]) -> list[str]:
        return [visible(p) for p in self.tokenizer.convert_ids_to_tokens(ids)]

    # ---- positions ------------------------------------------------------------------------------------------
    def message_boundaries(self, probe: Probe) -> list[int] | None:
        """Where each message's rendering ends, when renderings of shorter prefixes are string prefixes.
        Computed once per probe: boundary-merge and every finding's message index read it."""
        if probe.id not in self._boundaries:
            self._boundaries[probe.id] = self._message_boundaries(probe)
        return self._boundaries[probe.id]

    def _message_boundaries(self, probe: Probe) -> list[int] | None:
        full = self.rendered[probe.id]
        if not full.ok or probe.continue_final_message:
            return None
        ends = []
        messages = probe.message_list()
        for k in range(1, len(messages) + 1):
            partial = self.renderer.render(messages[:k], probe.tool_list())
            if not partial.ok or not (full.text or "").startswith(partial.text or ""):
                return None
            ends.append(len(partial.text or ""))
        return ends

    def probe_token_ids(self, probe: Probe) -> list[int]:
        """`apply_chat_template(tokenize=True)` on the probe, with its flags (computed once per probe)."""
        if probe.id not in self._probe_ids:
            self._probe_ids[probe.id] = self.renderer.token_ids(
                probe.message_list(),
                probe.tool_list(),
                add_generation_prompt=probe.add_generation_prompt,
                continue_final_message=probe.continue_final_message,
            )
        return list(self._probe_ids[probe.id])

    def text_difference(self, probe: Probe, what: str, labels: tuple[str, str], a: str, b: str) -> Finding:
        """A finding for two texts that should be equal: first differing char, its message, both sides."""
        pos = first_difference(a, b)
        message = self.message_at(probe, pos)
        return Finding(
            probe.id,
            f"probe {probe.id}: {what} at char {pos} (message {message}): {labels[0]} "
            f"{around(a, pos, self.control_tokens)} vs {labels[1]} {around(b, pos, self.control_tokens)}",
            {"char_position": pos, "message_index": message},
        )

    def message_at(self, probe: Probe, pos: int) -> int | None:
        bounds = self.message_boundaries(probe)
        if bounds is None:
            return None
        for index, end in enumerate(bounds):
            if pos < end:
                return index
        return len(bounds) - 1

    # ---- assistant spans ------------------------------------------------------------------------------------
    def spans(self, probe: Probe) -> TurnSpans:
        """The render-difference spans of a probe's assistant turns (raises what the template raises)."""

        def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
            r = self.renderer.render(messages, probe.tool_list(), add_generation_prompt=add_generation_prompt)
            if not r.ok:
                raise ValueError(r.error)
            return r.text or ""

        return assistant_spans(
            render,
            probe.message_list(),
            self.stop_tokens,
            self.control_tokens,
            add_generation_prompt=probe.add_generation_prompt,
            full=self.rendered[probe.id].text,
        )
