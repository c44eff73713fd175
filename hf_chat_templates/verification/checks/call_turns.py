"""What `nothing-dropped` says when the text it finds dropped stands beside tool calls: the model is trained on a
call turn without its text (a template that writes calls only, or content only when it `is string`)."""

from __future__ import annotations

from ...conversations.probes import Probe, Sentinel

CALL_TURN_HINT = (
    "write a call turn's content before its calls in the branch that writes calls, as a string or as its text "
    "parts: `{% if message.content is string %}{{ message.content }}{% else %}{% for p in message.content or [] %}"
    "{{ p.text }}{% endfor %}{% endif %}`"
)


def _beside_calls(probe: Probe, s: Sentinel) -> bool:
    if s.kind not in ("content", "part") or s.message is None:
        return False
    message = probe.messages[s.message]
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def beside_calls(probe: Probe, s: Sentinel) -> str:
    """Words for a dropped string that is a call turn's text, else ''."""
    if not _beside_calls(probe, s):
        return ""
    return "; it is the text beside the turn's tool calls: the model is trained on a call turn without its text"


def call_turn_hint(probe: Probe, s: Sentinel) -> str | None:
    """The fix for a dropped call turn's text (None: the check's own)."""
    return CALL_TURN_HINT if _beside_calls(probe, s) else None
