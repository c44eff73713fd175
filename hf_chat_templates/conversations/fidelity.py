"""Probes whose strings and values a template could escape, encode again or rewrite, for `values-faithful`."""

from __future__ import annotations

from .probes import Probe


def fidelity_probes(id_format: str = "openai") -> list[Probe]:
    return []
