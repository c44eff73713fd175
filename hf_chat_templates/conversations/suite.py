"""The probe suite `verify` renders: the core probes (plain turns, tools, content shapes), the agent scenarios (each
a series of requests an agent sends, and the conversation trained on), and the probes whose values a template could
escape or encode again."""

from __future__ import annotations

from .call_turns import call_turn_probes
from .fidelity import fidelity_probes
from .probes import Probe, core_probes
from .scenarios import scenario_probes


def build_probes(id_format: str = "openai") -> tuple[Probe, ...]:
    """The probe suite, built fresh (probes are data; callers may mutate their copies), with tool-call ids in
    `id_format` ("openai" or "mistral", see probes.id_format_for)."""
    return tuple(
        [
            *core_probes(id_format),
            *scenario_probes(id_format),
            *call_turn_probes(id_format),
            *fidelity_probes(id_format),
        ]
    )
