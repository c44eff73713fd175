"""Which assistant turns train (`train_on`): every one (`all`), the last one (`last`), or those whose message says
so (`weighted`: `weight` 0 or 1, as tinker-cookbook's supervised data writes it, or `train` true or false; trained
when absent; the keys are taken off the messages before rendering)."""

from __future__ import annotations

from typing import Any

from ..template.spans import Span

WEIGHT_KEYS = ("weight", "train")


def turn_weight(message: dict[str, Any], index: int) -> bool:
    """Whether an assistant message trains under train_on="weighted": its `weight` (0 or 1) or `train` (a bool)."""
    weight, train = message.get("weight"), message.get("train")
    if weight is not None and not (isinstance(weight, (int, float)) and weight in (0, 1)):
        raise ValueError(f"message {index}: weight {weight!r} is not 0 or 1")
    if train is not None and not isinstance(train, bool):
        raise ValueError(f"message {index}: train {train!r} is not true or false")
    if weight is not None and train is not None and bool(weight) != train:
        raise ValueError(f"message {index}: weight {weight!r} and train {train!r} disagree")
    return bool(weight) if weight is not None else train is not False


def trained_spans(messages: list[dict[str, Any]], spans: tuple[Span, ...], train_on: str) -> tuple[bool, ...]:
    """Which spans train. Spans from {% generation %} markers carry no message: they are matched to the assistant
    messages in order, and must be as many."""
    if train_on == "all":
        return (True,) * len(spans)
    assistants = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    owners = [s.message for s in spans]
    if any(owner < 0 for owner in owners):
        if len(spans) != len(assistants):
            raise ValueError(
                f"its {len(spans)} {{% generation %}} span(s) cannot be matched to its {len(assistants)} "
                f"assistant message(s) for train_on={train_on}"
            )
        owners = assistants
    return tuple(trains(messages, owner, train_on, assistants) for owner in owners)


def trains(messages: list[dict[str, Any]], i: int, train_on: str, assistants: list[int] | None = None) -> bool:
    """Whether assistant message `i` trains under `train_on` (`assistants`: the assistant messages' indices)."""
    if train_on == "all":
        return True
    if train_on == "last":
        if assistants is None:
            assistants = [k for k, m in enumerate(messages) if m.get("role") == "assistant"]
        return i == assistants[-1]
    return turn_weight(messages[i], i)


def per_turn(record: dict[str, Any], train_on: str = "all") -> list[dict[str, Any]]:
    """`prepare --per-turn`: one example per assistant turn, the conversation cut after it (the request an agent
    sends at that generation point, plus that answer); the turn is the last message of its example, so it trains
    with train_on="last". Under "weighted", only the turns whose message says so (`turn_weight`) give an example.
    A record without an assistant turn gives itself (it is reported as having nothing to train)."""
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list):
        return [record]  # not a conversation: normalizing says so
    ends = [i + 1 for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"]
    if train_on == "weighted":
        try:
            ends = [end for end in ends if turn_weight(messages[end - 1], end - 1)]
        except ValueError:
            return [record]  # a malformed weight: rendering the record whole reports it
    if not ends:
        return [record]
    return [{**record, "messages": messages[:end]} for end in ends]
