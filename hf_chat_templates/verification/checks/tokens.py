"""Checks on how a rendering becomes token ids: control tokens, BOS, round trips, boundaries, stops, injection."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

from ...conversations.probes import Probe, injection_probe
from ...template.syntax import template_literals
from ...tokenizer.folder import GENERATION_CONFIG
from ..context import RecordContext, VerifyContext
from ..results import STOP_TOKEN_HINT, CheckResult, Finding, around, first_difference, verdict, visible
from ..text_markers import PIPE_TOKEN as _PIPE_TOKEN
from ..text_markers import literal_marker_as_text, markers_read_as_text


def _rendered_probes(ctx: VerifyContext) -> Iterator[tuple[Probe, str]]:
    for probe in ctx.probes:
        r = ctx.rendered[probe.id]
        if r.ok and ctx.applicable(probe):
            yield probe, r.text or ""


def _asserted(ctx: VerifyContext) -> set[str]:
    """The tokens the caller or a bundled family declares, and the stops: each must be one registered id."""
    family = ctx.tokens.control_tokens if ctx.tokens.origin.startswith("the bundled family") else ()
    return {*ctx.declared_controls, *(ctx.declared_stops or ()), *family, *ctx.stop_tokens}


def _text_by_design(ctx: VerifyContext, token: str, asserted: set[str], pipes_as_text: bool = False) -> bool:
    """An inferred token the tokenizer has no added token for, in a shape that is also plain text (`[INST]`,
    `<tool_call>`, `</parameter>`): models such as Mixtral are trained with it in pieces. `<|…|>` and `<｜…｜>`
    (or half-piped, `<|turn>`), and Mistral's `[TOOL_CALLS]`-like names, are written only as tokens, unless
    `pipes_as_text` (`markers_read_as_text` found the template's `<|…|>` markers to be text by design)."""
    return (
        token not in asserted
        and token not in ctx.added_tokens
        and (pipes_as_text or not _PIPE_TOKEN.fullmatch(token))
        and not _MISTRAL_TOKEN.fullmatch(token)
    )


# `[TOOL_CALLS]`, `[AVAILABLE_TOOLS]`, `[/TOOL_RESULTS]`: upper-case names joined by an underscore in brackets, which
# Mistral's tokenizers hold as control tokens (unlike `[INST]`, plain text in its first vocabulary).
_MISTRAL_TOKEN = re.compile(r"\[/?[A-Z]+(?:_[A-Z]+)+\]")
TEXT_TOKEN_NOTE = (
    "written as text by this tokenizer; if the model was trained with it as one token, declare it with "
    "--control-token {token}"
)


def _atomic_finding(ctx: VerifyContext, token: str, ids: list[int], where: tuple[str | None, int]) -> Finding | None:
    """Why `token` is not one registered id that keeps the text around it, or None."""
    added = ctx.added_tokens.get(token)
    place = f" (written in probe {where[0]} at char {where[1]})" if where[0] else " (in the template's literals)"
    detail = {"token": token, "ids": ids, "pieces": ctx.pieces(ids), "probe_char": where[1]}
    if len(ids) != 1:
        text = f"{token} is not one token: it encodes to {len(ids)} ids {ids} {ctx.pieces(ids)}{place}"
    elif added is None:
        text = (
            f"{token} is one id ({ids[0]}) but not a registered token{place}: a vocabulary piece, which "
            "pre-tokenization splits in some contexts"
        )
    elif not added.special and token in ctx.stop_tokens:
        text = (
            f"{token} is one id ({ids[0]}) but not a registered special token{place}: a stop token that "
            "skip_special_tokens keeps in the output, and that engines reading token types do not stop on"
        )
    elif added.normalized or added.lstrip or added.rstrip:
        text = (
            f"{token} (id {ids[0]}) is registered with normalized={added.normalized}, lstrip={added.lstrip}, "
            f"rstrip={added.rstrip}: it eats or changes the text around it{place}"
        )
    else:
        return None
    return Finding(where[0], text, detail)


def _role_marker_findings(ctx: VerifyContext, texts: dict[str, str]) -> list[Finding]:
    """Info on each control-token-shaped string the template builds from a role its format does not have (ChatGLM3
    writes any role as `<|role|>`; its tokenizer has `<|user|>` but no `<|tool|>`): a stated limit, not a token."""
    findings = []
    for token, role in ctx.role_markers.items():
        where = next(((pid, text.find(token)) for pid, text in texts.items() if token in text), None)
        if where is None:
            continue  # only a rendering that survives a crash writes it: the template refuses that input first
        before, after = token.split(role, 1)
        roles = dict.fromkeys(str(m.get("role")) for p in ctx.probes for m in p.messages)
        siblings = [t for r in roles if (t := before + r + after) != token and t in ctx.added_tokens]
        findings.append(
            Finding(
                where[0],
                f"the template writes the role {role!r} as {token}, which the model has no token for (it has "
                f"{', '.join(siblings)}): a role its format does not have (written in probe {where[0]} at char "
                f"{where[1]}); messages in that role are written in pieces, as text the model was not trained on",
                {"token": token, "role": role, "probe_char": where[1], "registered": siblings},
                severity="info",
                cause="input normalization",
                hint=f"send no {role!r} messages, or map them to a role the format has; if the model was trained "
                f"with {token} as one token, declare it with --control-token {token}",
            )
        )
    return findings


def control_tokens_atomic(ctx: VerifyContext) -> CheckResult:
    findings = []
    texts = {p.id: t for p, t in _rendered_probes(ctx)}
    markup = ctx.markup_tokens
    asserted = _asserted(ctx)
    literals = template_literals(ctx.template) + "\n" + template_literals(ctx.tool_template or "")
    controls = []
    written: dict[str, tuple[str | None, int]] = {}
    for token in (*ctx.control_tokens, *markup):
        where = next(((pid, text.find(token)) for pid, text in texts.items() if token in text), (None, -1))
        if where[0] is None and token not in literals and token not in asserted:
            continue  # assembled for input the template does not support (phi-3's `<|tool|>`): no probe shows it
        written[token] = where
    as_text = markers_read_as_text(ctx, list(written))
    for token, place in written.items():
        if token not in markup:
            controls.append(token)
        ids = ctx.tokenizer.encode(token, add_special_tokens=False)
        finding = _atomic_finding(ctx, token, ids, place)
        if finding is not None and _text_by_design(ctx, token, asserted, as_text is not None):
            finding.text += ": " + (
                f"{as_text}; if the model was trained with it as one token, declare it with --control-token {token}"
                if as_text and _PIPE_TOKEN.fullmatch(token)
                else TEXT_TOKEN_NOTE.format(token=token)
            )
            finding.severity = "info"
            finding.hint = f"if the model was trained with {token} as one token: --control-token {token}"
        # markup (tool-call and reasoning tags) has its own severity: a warning when left in pieces
        as_literal = finding is not None and token not in markup
        text_marker = literal_marker_as_text(ctx, token, ids, texts, asserted) if as_literal else None
        if finding is not None and finding.severity is None and text_marker is not None:
            finding.text += f": {text_marker[0]}; if the model was trained with it as one token, declare it with "
            finding.text += f"--control-token {token}"
            finding.severity = text_marker[1]
            finding.hint = f"if the model was trained with {token} as one token: --control-token {token}"
        if finding is not None:
            findings.append(finding)
    findings += _role_marker_findings(ctx, texts)
    # Markup (tool-call and reasoning tags) is text in some models by design: left in pieces, it is a warning.
    graded = [f for f in findings if f.severity is None]
    status = "warn" if all(f.detail.get("token") in markup for f in graded) else "fail"
    return verdict(
        "control-tokens-atomic",
        findings,
        f"{len(controls)} control tokens, each one registered id: {' '.join(controls)}"
        + (f"; markup {' '.join(markup)} too" if markup else ""),
        "register each control token as one special added token (normalized, lstrip and rstrip false): "
        f"{ctx.install_command()} does it (--control-token TOKEN declares one it misses)",
        status=status,
    )


def ids_match_string(ctx: VerifyContext) -> CheckResult:
    findings = []
    for probe, text in _rendered_probes(ctx):
        ids = ctx.probe_token_ids(probe)
        expected = ctx.renderer.encode(text)
        if ids != expected:
            i = first_difference(ids, expected)
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: apply_chat_template(tokenize=True) differs from "
                    f"tokenizing the rendered string at token {i}: "
                    f"{ctx.pieces(ids[i : i + 3])} vs {ctx.pieces(expected[i : i + 3])}",
                    {"token_position": i, "tokenize_true": ids[i : i + 5], "string": expected[i : i + 5]},
                )
            )
    return verdict(
        "ids-match-string",
        findings,
        "apply_chat_template ids equal the tokenized rendering",
        "tokenize rendered text with add_special_tokens=False, exactly as apply_chat_template does",
    )


def bos_positions(ids: list[int], bos_id: int, *, bos_is_eos: bool) -> list[int]:
    """Where the BOS id stands. When BOS is also EOS (Granite, GPT-2), the id ends turns too: only the run at the
    very start is a BOS there."""
    if not bos_is_eos:
        return [i for i, t in enumerate(ids) if t == bos_id]
    run = 0
    while run < len(ids) and ids[run] == bos_id:
        run += 1
    return list(range(run))


TOKENIZE_RENDERED = "apply_chat_template(..., tokenize=True) or tokenizer(text, add_special_tokens=False)"


def _defaults_finding(
    ctx: VerifyContext, probe: Probe, text: str, positions: list[int], bos: str, bos_id: int
) -> Finding:
    """A second BOS only where a rendering is tokenized with the defaults: the post-processor adds the BOS the
    template writes. A warning: tokenizer(text) keeps its BOS for plain text, and a rendering has its convention.
    A tokenizer that adds two BOS to any text is an error."""
    if bos not in text:
        return Finding(
            probe.id,
            f"probe {probe.id}: tokenizer(rendered) with its defaults has {len(positions)} BOS {bos} (id {bos_id}) "
            f"at token positions {positions[:4]}, though the rendering writes none: the tokenizer adds BOS twice "
            "to any text",
            {"path": "tokenizer(rendered) with its defaults", "token_positions": positions, "token": bos},
            hint="add BOS once in tokenizer.json's post_processor (TemplateProcessing 'single')",
        )
    return Finding(
        probe.id,
        f"probe {probe.id}: tokenizer(rendered) with its defaults has {len(positions)} BOS {bos} (id {bos_id}) at "
        f"token positions {positions[:4]}: the template writes {bos} and the tokenizer's post-processor adds it "
        f"again; apply_chat_template(tokenize=True) gives one",
        {"path": "tokenizer(rendered) with its defaults", "token_positions": positions, "token": bos},
        severity="warning",
        hint=f"tokenize a rendering with {TOKENIZE_RENDERED}, never tokenizer(text) with its defaults (its BOS is "
        f"for plain text: eval harnesses, completions); to drop the post-processor's BOS instead, "
        f"{ctx.install_command('--no-bos-postprocessor')} (plain text then gets none)",
    )


def _tokenize_true_finding(
    probe: Probe, text: str, positions: list[int], bos: str, bos_id: int, bos_is_eos: bool
) -> Finding:
    """Two BOS in the ids a model is trained on and served: an error, the template's when it writes them."""
    twice = text.startswith(bos * 2) if bos_is_eos else len(positions) <= text.count(bos)
    where = "the template writes it more than once" if twice else "apply_chat_template adds one the template writes"
    return Finding(
        probe.id,
        f"probe {probe.id}: apply_chat_template(tokenize=True) has {len(positions)} BOS {bos} (id {bos_id}) at "
        f"token positions {positions[:4]}: {where}",
        {"path": "apply_chat_template(tokenize=True)", "token_positions": positions, "token": bos},
        hint="write {{ bos_token }} once, at the start of the template"
        if twice
        else "tokenize with add_special_tokens=False: check the tokenizer's post-processor and transformers version",
        cause="template" if twice else "tokenizer config",
    )


def doubled(positions: list[int], text: str, bos: str) -> bool:
    """Whether BOS stands twice at the start (token positions 0 and 1), or once more than the rendering writes it
    (the tokenizer adds one to the template's). A BOS the template writes to open every message (Seed-OSS's
    `<seed:bos>user`) is its format, not a doubled BOS."""
    return positions[:2] == [0, 1] or len(positions) > text.count(bos)


def no_double_bos(ctx: VerifyContext) -> CheckResult:
    bos = ctx.tokenizer.bos_token
    if bos is None:
        return CheckResult("no-double-bos", "skip", "the tokenizer has no BOS token")
    bos_id = ctx.tokenizer.bos_token_id
    bos_is_eos = bos_id == ctx.tokenizer.eos_token_id
    findings: list[Finding] = []
    for probe, text in _rendered_probes(ctx):
        # The ids a model is trained on and served: two BOS there is an error, whoever tokenizes them.
        positions = bos_positions(ctx.probe_token_ids(probe), bos_id, bos_is_eos=bos_is_eos)
        if len(positions) > 1 and doubled(positions, text, bos):
            findings.append(_tokenize_true_finding(probe, text, positions, bos, bos_id, bos_is_eos))
            break  # one probe shows it; every probe would repeat it
        if not findings:  # the defaults' double BOS is the tokenizer's, the same on every probe: named once
            defaults = bos_positions(list(ctx.tokenizer(text)["input_ids"]), bos_id, bos_is_eos=bos_is_eos)
            if len(defaults) > 1 and doubled(defaults, text, bos):
                findings.append(_defaults_finding(ctx, probe, text, defaults, bos, bos_id))
    return verdict(
        "no-double-bos",
        findings,
        f"at most one {bos} on both tokenization paths",
        f"tokenize a rendering with {TOKENIZE_RENDERED}",
    )


def _stripping_token(ctx: VerifyContext, text: str, pos: int) -> tuple[str, str] | None:
    """The added token whose `rstrip` (or `lstrip`) flag ate the whitespace at `pos` of `text` on encoding: the
    token ends right before it (or starts right after the run of whitespace it begins). (token, flag) or None."""
    if pos >= len(text) or not text[pos].isspace():
        return None
    after = text[pos:].lstrip()
    for token, added in ctx.added_tokens.items():
        if added.rstrip and text.endswith(token, 0, pos):
            return token, "rstrip"
        if added.lstrip and after.startswith(token):
            return token, "lstrip"
    return None


def _stripped_finding(ctx: VerifyContext, finding: Finding, text: str, token: str, flag: str) -> Finding:
    """The decode difference explained by the token's flag, with the entry to change."""
    pos = finding.detail["char_position"]
    token_id = ctx.token_id(token)
    side = "after" if flag == "rstrip" else "before"
    reinstall = (
        f", or reinstall ({ctx.install_command()}), which registers it with lstrip and rstrip false"
        if token in ctx.control_tokens
        else ""
    )
    finding.text += (
        f": {token} (id {token_id}) is registered with {flag}=True, so encoding eats the whitespace {side} it "
        f"('{visible(text[pos])}' at char {pos}): the model never sees it, and decoding cannot give it back"
    )
    finding.detail |= {"token": token, "flag": flag, "id": token_id}
    in_config = ctx.folder is not None and "added_tokens_decoder" in ctx.folder.tokenizer_config
    finding.hint = (
        f'set "{flag}": false in tokenizer_config.json added_tokens_decoder["{token_id}"] ({token}), and in the '
        f"same entry of tokenizer.json added_tokens (added-tokens-agree compares them){reinstall}"
        if in_config
        else f'set "{flag}": false in the entry of {token} (id {token_id}) in tokenizer.json added_tokens{reinstall}'
    )
    finding.cause = "tokenizer config"
    return finding


def decode_roundtrip(ctx: VerifyContext) -> CheckResult:
    findings = []
    for probe, text in _rendered_probes(ctx):
        ids = ctx.renderer.encode(text)
        decoded = ctx.tokenizer.decode(ids)
        if decoded != text:
            finding = ctx.text_difference(
                probe, "decoding the ids changes the text", ("rendered", "decoded"), text, decoded
            )
            stripping = _stripping_token(ctx, text, finding.detail["char_position"])
            findings.append(_stripped_finding(ctx, finding, text, *stripping) if stripping else finding)
    return verdict(
        "decode-roundtrip",
        findings,
        "decoding the ids gives back every rendering",
        "check the tokenizer's normalizer and clean_up_tokenization_spaces (set it to false)",
    )


def _pad_example(ctx: VerifyContext) -> str:
    """A special token of the tokenizer that can pad (not a stop token), for a fix to name; TOKEN when none."""
    from ...installation.pad import pad_candidates

    def special(token: str) -> bool:
        added = ctx.added_tokens.get(token)
        return added is not None and added.special

    stops = {*ctx.stop_tokens, ctx.tokenizer.eos_token}
    found = pad_candidates((), ctx.tokenizer.unk_token, stops, special)
    return shlex.quote(found[0]) if found else "TOKEN"


def _stop_findings(ctx: VerifyContext, stop: str, sid: int, eos_ids: list[int], gen: dict | None) -> list[Finding]:
    """The stop token `stop` (id `sid`): where generation reads its stop ids must hold it, and pad must not be it."""
    findings = []
    declare = f"--stop-token {shlex.quote(stop)}" if ctx.variant is None else ""
    if sid not in eos_ids and stop != ctx.tokenizer.eos_token:
        where = f"{ctx.generation_key('eos_token_id')} {eos_ids}" if gen is not None else f"no {GENERATION_CONFIG}"
        fix = (
            f"{ctx.install_command(declare)} writes {sid} as the GGUF's eos (or eot) id"
            if ctx.gguf is not None
            else f"{ctx.install_command(declare)} merges {sid} into {GENERATION_CONFIG} eos_token_id"
        )
        findings.append(
            Finding(
                None,
                f"stop token {stop} (id {sid}) is neither in {where} nor the tokenizer's "
                f"eos_token {ctx.tokenizer.eos_token}: generation will not stop there",
                {"token": stop, "id": sid},
                hint=fix,
            )
        )
    pad_ids = {ctx.tokenizer.pad_token_id} | ({gen.get("pad_token_id")} if gen else set())
    if sid in pad_ids:
        where = f" ({ctx.generation_key('pad_token_id')})" if ctx.gguf is not None else ""
        findings.append(
            Finding(
                None,
                f"pad token{where} is the stop token {stop} (id {sid}): masking padding by id "
                "masks the stop token, and the model never learns to stop",
                {"token": stop, "id": sid},
                hint=f"{ctx.install_command(f'--pad-token {_pad_example(ctx)}')} sets a pad token that is not a "
                "stop token (without --pad-token, install keeps the tokenizer's pad)",
            )
        )
    return findings


def stop_token_registered(ctx: VerifyContext) -> CheckResult:
    if not ctx.stop_tokens:
        why = [n for n in ctx.tokens.notes if not n.startswith("no token ends an assistant turn")]
        return CheckResult(
            "stop-token-registered",
            "fail",
            "no stop token: no token ends an assistant turn in the renderings, and the folder lists no generation "
            "stop the template writes; generation would never stop, and the model is never trained to"
            + (f" ({'; '.join(why)})" if why else ""),
            "plain",
            hint=f"end assistant turns with a registered special token, or {STOP_TOKEN_HINT}",
        )
    gen = ctx.folder.generation_config if ctx.folder is not None else None
    eos_ids = gen.get("eos_token_id") if gen else None
    eos_ids = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids or [])
    findings = []
    for stop in ctx.stop_tokens:
        sid = ctx.token_id(stop)
        if sid is None:
            findings.append(Finding(None, f"stop token {stop} is not one id", {"token": stop}))
            continue
        findings += _stop_findings(ctx, stop, sid, eos_ids, gen)
    return verdict(
        "stop-token-registered",
        findings,
        f"stop tokens {' '.join(ctx.stop_tokens)} are eos ids and not pad",
        f"{ctx.install_command()} merges the stop ids into {ctx.generation_key('eos_token_id')} "
        "(--stop-token TOKEN declares the stop; --pad-token TOKEN sets a pad that is not one)",
    )


def injection(ctx: VerifyContext) -> CheckResult:
    specials = [t for t in ctx.control_tokens if t in ctx.added_tokens]
    if not specials:
        return CheckResult("injection", "skip", "no registered control tokens to spell")
    probe = injection_probe(specials)
    messages = probe.message_list()
    r = ctx.renderer.render(messages)
    if not r.ok:
        return CheckResult("injection", "skip", f"the injection probe does not render ({r.error})", probe.id)
    control_ids = {ctx.token_id(t) for t in specials}
    ids = ctx.renderer.encode(r.text or "")
    baseline = dict(messages[0])
    baseline["content"] = baseline["content"].replace("".join(specials), "")
    expected = sum(1 for t in ctx.renderer.token_ids([baseline, messages[1]]) if t in control_ids)
    found = sum(1 for t in ids if t in control_ids)
    if found <= expected:
        return CheckResult("injection", "pass", "content that spells control tokens stays text", probe.id)
    try:
        sanitized = ctx.renderer.token_ids(messages, sanitize_control_tokens=True)
        prevented = sum(1 for t in sanitized if t in control_ids) == expected
    except Exception:  # older transformers or unsupported tokenizer
        prevented = False
    content_at = (r.text or "").find(messages[0]["content"])
    pos = content_at + messages[0]["content"].find(specials[0]) if content_at >= 0 else -1
    where = f"message 0, char {pos}: {around(r.text or '', pos, ctx.control_tokens)}"
    if ctx.sanitize:
        if prevented:
            return CheckResult(
                "injection",
                "pass",
                "content that spells control tokens stays text with sanitize_control_tokens=True",
                probe.id,
                {"control_ids_found": found - expected, "sanitize_prevents": True},
            )
        return CheckResult(
            "injection",
            "fail",
            f"probe {probe.id}: user content spelling {' '.join(specials)} becomes {found - expected} control "
            f"token(s) even with sanitize_control_tokens=True ({where}): content can forge turns",
            probe.id,
            {"control_ids_found": found - expected, "sanitize_prevents": False},
            "escape or drop control-token spellings in content before rendering",
            "input normalization",
        )
    # What transformers does with any template: the content is the user's, and sanitizing it is the caller's choice.
    return CheckResult(
        "injection",
        "info",
        f"probe {probe.id}: user content spelling {' '.join(specials)} becomes {found - expected} control token(s) "
        f"({where}), as apply_chat_template does for any template"
        + (
            "; apply_chat_template(..., sanitize_control_tokens=True) keeps them as text"
            if prevented
            else "; sanitize_control_tokens=True did not prevent it"
        ),
        probe.id,
        {"control_ids_found": found - expected, "sanitize_prevents": prevented},
        "pass sanitize_control_tokens=True to apply_chat_template for untrusted content",
    )


# ---- the same checks on one dataset record (verify --conversations) -----------------------------------------------


def no_double_bos_record(rc: RecordContext) -> str | None:
    if rc.bos_count <= 1:
        return None
    return f"the rendering's ids (apply_chat_template(tokenize=True)) have {rc.bos_count} BOS"


def decode_roundtrip_record(rc: RecordContext) -> str | None:
    if rc.decoded == rc.text:
        return None
    return f"decoded text differs at char {first_difference(rc.decoded, rc.text)}"


def injection_record(rc: RecordContext) -> str | None:
    strings = [s for _, s in rc.strings()]
    spelled = [t for t in rc.control_tokens if any(t in s for s in strings)]
    if spelled:
        return f"content spells control token {spelled[0]}"
    # a role is written into the turn's header as it is: one that spells a control token forges the structure
    for i, m in enumerate(rc.record["messages"]):
        role = m.get("role")
        if isinstance(role, str) and (token := next((t for t in rc.control_tokens if t in role), None)):
            return f"message {i}: the role {role!r} spells control token {token}"
    return None
