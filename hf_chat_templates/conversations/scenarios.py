"""Agent scenarios: conversations shaped like what agents send, each with its generation points."""

from __future__ import annotations

from .probes import Probe


def scenario_probes(id_format: str = "openai") -> list[Probe]:
    return []
