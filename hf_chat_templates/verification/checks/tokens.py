"""Checks on how a rendering becomes token ids: control tokens, BOS, round trips, boundaries, stops, injection."""

from __future__ import annotations

from collections.abc import Iterator

from ...conversations.probes import Probe, injection_probe
from ..context import RecordContext, VerifyContext
from ..results import CheckResult, Finding, around, first_difference, verdict


def _rendered_probes(ctx: VerifyContext) -> Iterator[tuple[Probe, str]]:
    for probe in ctx.probes:
        r = ctx.rendered[probe.id]
        if r.ok and ctx.applicable(probe):
            yield probe, r.text or ""


def control_tokens_atomic(ctx: VerifyContext) -> CheckResult:
    findings = []
    texts = {p.id: t for p, t in _rendered_probes(ctx)}
    markup = ctx.markup_tokens
    for token in (*ctx.control_tokens, *markup):
        ids = ctx.tokenizer.encode(token, add_special_tokens=False)
        added = ctx.added_tokens.get(token)
        where = next(((pid, text.find(token)) for pid, text in texts.items() if token in text), (None, -1))
        place = f" (written in probe {where[0]} at char {where[1]})" if where[0] else " (in the template's literals)"
        detail = {"token": token, "ids": ids, "pieces": ctx.pieces(ids), "probe_char": where[1]}
        if len(ids) != 1:
            findings.append(
                Finding(
                    where[0],
                    f"{token} is not one token: it encodes to {len(ids)} ids {ids} {ctx.pieces(ids)}{place}",
                    detail,
                )
            )
        elif added is None:
            findings.append(
                Finding(
                    where[0],
                    f"{token} is one id ({ids[0]}) but not a registered token{place}: a vocabulary piece, which "
                    "pre-tokenization splits in some contexts",
                    detail,
                )
            )
        elif not added.special and token in ctx.stop_tokens:
            findings.append(
                Finding(
                    where[0],
                    f"{token} is one id ({ids[0]}) but not a registered special token{place}: a stop token that "
                    "skip_special_tokens keeps in the output, and that engines reading token types do not stop on",
                    detail,
                )
            )
        elif added.normalized or added.lstrip or added.rstrip:
            findings.append(
                Finding(
                    where[0],
                    f"{token} (id {ids[0]}) is registered with normalized="
                    f"{added.normalized}, lstrip={added.lstrip}, rstrip={added.rstrip}: it "
                    f"eats or changes the text around it{place}",
                    detail,
                )
            )
    # Markup (tool-call and reasoning tags) is text in some models by design: left in pieces, it is a warning.
    status = "warn" if findings and all(f.detail.get("token") in markup for f in findings) else "fail"
    return verdict(
        "control-tokens-atomic",
        findings,
        f"{len(ctx.control_tokens)} control tokens, each one registered id: {' '.join(ctx.control_tokens)}"
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


def no_double_bos(ctx: VerifyContext) -> CheckResult:
    bos = ctx.tokenizer.bos_token
    if bos is None:
        return CheckResult("no-double-bos", "skip", "the tokenizer has no BOS token")
    bos_id = ctx.tokenizer.bos_token_id
    bos_is_eos = bos_id == ctx.tokenizer.eos_token_id
    findings = []
    for probe, text in _rendered_probes(ctx):
        paths = {
            "apply_chat_template(tokenize=True)": ctx.probe_token_ids(probe),
            "tokenizer(rendered) with its defaults": list(ctx.tokenizer(text)["input_ids"]),
        }
        for path, ids in paths.items():
            positions = bos_positions(ids, bos_id, bos_is_eos=bos_is_eos)
            if len(positions) > 1:
                findings.append(
                    Finding(
                        probe.id,
                        f"probe {probe.id}: {path} has {len(positions)} BOS {bos} (id "
                        f"{bos_id}) at token positions {positions[:4]}",
                        {"path": path, "token_positions": positions, "token": bos},
                    )
                )
        if findings:
            break  # one probe shows it; every probe would repeat it
    writes = "bos_token" in ctx.template
    hint = (
        "the template writes {{ bos_token }} and the tokenizer's post-processor adds it again: tokenize "
        "rendered text with add_special_tokens=False, or drop the BOS from the post-processor"
        if writes
        else "the tokenizer adds BOS twice; check its post-processor"
    )
    return verdict("no-double-bos", findings, f"at most one {bos} on both tokenization paths", hint)


def decode_roundtrip(ctx: VerifyContext) -> CheckResult:
    findings = []
    for probe, text in _rendered_probes(ctx):
        ids = ctx.renderer.encode(text)
        decoded = ctx.tokenizer.decode(ids)
        if decoded != text:
            findings.append(
                ctx.text_difference(probe, "decoding the ids changes the text", ("rendered", "decoded"), text, decoded)
            )
    return verdict(
        "decode-roundtrip",
        findings,
        "decoding the ids gives back every rendering",
        "check the tokenizer's normalizer and clean_up_tokenization_spaces (set it to false)",
    )


def boundary_merge(ctx: VerifyContext) -> CheckResult:
    findings = []
    checked = 0
    for probe, text in _rendered_probes(ctx):
        bounds = ctx.message_boundaries(probe)
        if not bounds:
            continue
        checked += 1
        ids, offsets = ctx.renderer.encode_with_offsets(text)
        for b_index, boundary in enumerate(bounds[:-1]):
            for t_index, (start, end) in enumerate(offsets):
                if start < boundary < end:
                    findings.append(
                        Finding(
                            probe.id,
                            f"probe {probe.id}: token {t_index} {ctx.pieces([ids[t_index]])} spans the boundary "
                            f"between message {b_index} and {b_index + 1} at char {boundary}: "
                            f"{around(text, boundary, ctx.control_tokens)}",
                            {"token_position": t_index, "char_position": boundary, "message_index": b_index + 1},
                        )
                    )
                    break
    if not checked:
        return CheckResult("boundary-merge", "skip", "no probe renders its messages as string prefixes")
    return verdict(
        "boundary-merge",
        findings,
        f"no token spans a message boundary ({checked} probes)",
        "end each turn with a control token or a newline the pre-tokenizer always splits on",
    )


def stop_token_registered(ctx: VerifyContext) -> CheckResult:
    if not ctx.stop_tokens:
        return CheckResult(
            "stop-token-registered",
            "fail",
            ctx.missing_turn_end() or "no token is known to end an assistant turn",
            "plain",
            hint="end assistant turns with a registered special token, or declare it: --stop-token TOKEN",
        )
    gen = ctx.folder.generation_config if ctx.folder is not None else None
    eos_ids = gen.get("eos_token_id") if gen else None
    eos_ids = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids or [])
    pad_ids = {ctx.tokenizer.pad_token_id} | ({gen.get("pad_token_id")} if gen else set())
    findings = []
    for stop in ctx.stop_tokens:
        sid = ctx.token_id(stop)
        if sid is None:
            findings.append(Finding(None, f"stop token {stop} is not one id", {"token": stop}))
            continue
        if sid not in eos_ids and stop != ctx.tokenizer.eos_token:
            where = f"generation_config.json eos_token_id {eos_ids}" if gen is not None else "no generation_config.json"
            findings.append(
                Finding(
                    None,
                    f"stop token {stop} (id {sid}) is neither in {where} nor the tokenizer's "
                    f"eos_token {ctx.tokenizer.eos_token}: generation will not stop there",
                    {"token": stop, "id": sid},
                )
            )
        if sid in pad_ids:
            findings.append(
                Finding(
                    None,
                    f"pad token is the stop token {stop} (id {sid}): masking padding by id "
                    "masks the stop token, and the model never learns to stop",
                    {"token": stop, "id": sid},
                )
            )
    return verdict(
        "stop-token-registered",
        findings,
        f"stop tokens {' '.join(ctx.stop_tokens)} are eos ids and not pad",
        f"{ctx.install_command()} sets generation_config eos_token_id and a distinct pad token "
        "(--stop-token TOKEN declares the stop)",
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
    return f"tokenizer(rendered) with its defaults has {rc.bos_count} BOS" if rc.bos_count > 1 else None


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
