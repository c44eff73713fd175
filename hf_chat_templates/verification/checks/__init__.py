"""Every check, in the order they run: one ordered tuple of (id, function of the context). Each module holds one
concern: `tokens` (how a rendering becomes ids), `merge` (tokens across messages), `content` (what a rendering
keeps), `completion` (what an answer trains), `training` (the assistant mask), `portability` (the clock, other
engines, the official renderer), `folder` (the files agree), `safety` (what the template reaches for, hides or says
on a trigger), `structure` (turns opened and closed, BOS first, no placeholder written as text). docs/checks.md
describes each check, its severities and its fix."""

from __future__ import annotations

from collections.abc import Callable

from ..context import RecordContext, VerifyContext
from ..results import CheckResult
from . import (
    completion,
    content,
    engines,
    fidelity,
    folder,
    merge,
    portability,
    safety,
    stability,
    structure,
    tokens,
    training,
)

Check = Callable[[VerifyContext], CheckResult]
RecordCheck = Callable[[RecordContext], "str | None"]

CHECKS: tuple[tuple[str, Check], ...] = (
    ("renders", content.renders),
    ("control-tokens-atomic", tokens.control_tokens_atomic),
    ("ids-match-string", tokens.ids_match_string),
    ("no-double-bos", tokens.no_double_bos),
    ("decode-roundtrip", tokens.decode_roundtrip),
    ("nothing-dropped", content.nothing_dropped),
    ("values-faithful", fidelity.values_faithful),
    ("completion-matches-content", completion.completion_matches_content),
    ("structure", structure.structure),
    ("assistant-mask", training.assistant_mask),
    ("prefix-stable", stability.prefix_stable),
    ("boundary-merge", merge.boundary_merge),
    ("stop-token-registered", tokens.stop_token_registered),
    ("deterministic", portability.deterministic),
    ("engine-parity", engines.engine_parity),
    ("reference-parity", portability.reference_parity),
    ("injection", tokens.injection),
    ("template-sources-agree", folder.template_sources_agree),
    ("added-tokens-agree", folder.added_tokens_agree),
    ("generation-config-consistent", folder.generation_config_consistent),
    ("template-safety", safety.template_safety),
)
CHECK_ORDER = tuple(check_id for check_id, _ in CHECKS)
# Where each check's findings are fixed, unless a finding says otherwise (see results.CAUSES).
CHECK_CAUSES = {
    "renders": "template",
    "control-tokens-atomic": "tokenizer config",
    "ids-match-string": "tokenizer config",
    "no-double-bos": "tokenizer config",
    "decode-roundtrip": "tokenizer config",
    "nothing-dropped": "template",
    "values-faithful": "template",
    "completion-matches-content": "template",
    "structure": "template",
    "assistant-mask": "template",
    "prefix-stable": "template",
    "boundary-merge": "tokenizer config",
    "stop-token-registered": "tokenizer config",
    "deterministic": "template",
    "engine-parity": "engine",
    "reference-parity": "template",
    "injection": "input normalization",
    "template-sources-agree": "tokenizer config",
    "added-tokens-agree": "tokenizer config",
    "generation-config-consistent": "tokenizer config",
    "template-safety": "template",
}

# What each check asks, in a few words (`verify --help` lists them; docs/checks.md says more).
CHECK_SUMMARIES = {
    "renders": "every probe renders in transformers' sandbox",
    "control-tokens-atomic": "each control token the template writes encodes to one id",
    "ids-match-string": "apply_chat_template's ids equal the rendered string tokenized",
    "no-double-bos": "at most one BOS, from the template or the tokenizer",
    "decode-roundtrip": "decoding the ids gives back the rendering",
    "nothing-dropped": "every content, tool call, argument and result is rendered",
    "values-faithful": "strings written as text, dict arguments as JSON",
    "completion-matches-content": "the trained answer is its content then the stop token",
    "structure": "turns opened are closed; BOS first; no placeholder as text",
    "assistant-mask": "the assistant mask covers each answer and its stop token",
    "prefix-stable": "each agent request is a token prefix of the next",
    "boundary-merge": "no token spans two messages",
    "stop-token-registered": "the stop tokens are generation stops",
    "deterministic": "the rendering does not depend on the clock",
    "engine-parity": "llama.cpp, TGI, vLLM, transformers.js render as transformers",
    "reference-parity": "token ids equal the official renderer's",
    "injection": "user content spelling a control token stays text",
    "template-sources-agree": "the folder's template files say the same",
    "added-tokens-agree": "tokenizer_config.json and tokenizer.json agree on added tokens",
    "generation-config-consistent": "generation_config.json agrees with the tokenizer",
    "template-safety": "what the template reaches for, hides or says on a trigger",
}

# The checks that also run on every record of a dataset, under the same ids: each returns the failure's message.
# `renders` is the rendering itself (a record that does not render is not checked further).
RECORD_CHECKS: tuple[tuple[str, RecordCheck], ...] = (
    ("no-double-bos", tokens.no_double_bos_record),
    ("decode-roundtrip", tokens.decode_roundtrip_record),
    ("nothing-dropped", content.nothing_dropped_record),
    ("injection", tokens.injection_record),
)
RECORD_CHECK_IDS = ("renders", *(check_id for check_id, _ in RECORD_CHECKS))
# The checks that render no probe: a run of only these reports no capabilities and no inferred tokens, which the
# report's header would otherwise render the probe suite for (`verify --only template-safety` stays static and fast).
PROBE_FREE = frozenset({"template-safety"})
# Reported, never failed: the content is the user's; `sanitize_control_tokens=True` is the fix.
WARNING_ONLY = frozenset({"injection"})


def check_ids() -> tuple[str, ...]:
    """Every check id, in the order they run."""
    return CHECK_ORDER
