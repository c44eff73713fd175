"""Packing: best-fit decreasing into rows of at most seq_len tokens, position_ids restarting per example, the label
of each example's first token masked, truncation and drops counted, the same result for every input shape."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hf_chat_templates import TrainingFeatures
from hf_chat_templates.errors import UsageError
from hf_chat_templates.training.features import IGNORE_INDEX
from hf_chat_templates.training.packing import PACKED_TYPES, PackStats, best_fit_decreasing, pack

from ..helpers import CONVERSATIONS

M = IGNORE_INDEX


def examples(lengths: list[int]) -> dict[str, list[list[int]]]:
    """Examples of the given lengths with distinct ids (example k holds k * 1000 + position) and trained labels
    after the first token."""
    ids = [[k * 1000 + t for t in range(n)] for k, n in enumerate(lengths)]
    return {"input_ids": ids, "labels": [[M, *row[1:]][: len(row)] for row in ids]}


def reference_bfd(lengths: list[int], seq_len: int) -> list[list[int]]:
    """Best-fit decreasing spelled out: of the rows with the least room the example fits in, the one that has had
    that room longest."""
    rows: list[list[int]] = []
    room: list[int] = []
    since: list[int] = []
    for step, index in enumerate(sorted(range(len(lengths)), key=lambda i: -lengths[i])):
        fits = [r for r in range(len(rows)) if room[r] >= lengths[index]]
        if fits:
            target = min(fits, key=lambda r: (room[r], since[r]))
        else:
            target = len(rows)
            rows.append([])
            room.append(seq_len)
            since.append(0)
        rows[target].append(index)
        room[target] -= lengths[index]
        since[target] = step
    return rows


def test_best_fit_decreasing_fills_the_fullest_row_that_fits() -> None:
    assert best_fit_decreasing([5, 3, 3, 2, 2, 1], 6) == [[0, 5], [1, 2], [3, 4]]
    assert best_fit_decreasing([2, 4, 2], 4) == [[1], [0, 2]]


@pytest.mark.parametrize("seed", range(20))
def test_best_fit_decreasing_equals_the_spelled_out_rule(seed: int) -> None:
    rng = random.Random(seed)
    seq_len = rng.choice([8, 16, 64])
    lengths = [rng.randint(1, seq_len) for _ in range(rng.randint(1, 60))]
    rows = best_fit_decreasing(lengths, seq_len)
    assert rows == reference_bfd(lengths, seq_len)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= seq_len for row in rows)


def test_rows_respect_seq_len_and_positions_restart_per_example() -> None:
    lengths = [5, 3, 7, 2, 4, 2]
    packed, stats = pack(examples(lengths), 8)
    assert set(packed) == set(PACKED_TYPES)
    for ids, labels, positions, mask, seq_lengths in zip(
        packed["input_ids"], packed["labels"], packed["position_ids"], packed["attention_mask"], packed["seq_lengths"]
    ):
        assert len(ids) == sum(seq_lengths) <= 8
        assert positions == [p for n in seq_lengths for p in range(n)]
        assert mask == [1] * len(ids)
        for first in [i for i, p in enumerate(positions) if p == 0]:
            assert ids[first] % 1000 == 0 and labels[first] == M  # an example starts, its first label masked
        assert [x for x, label in zip(ids, labels) if label != M] == [x for x in ids if x % 1000]
    flat = sorted(x for row in packed["input_ids"] for x in row)
    assert flat == sorted(x for row in examples(lengths)["input_ids"] for x in row)
    assert stats == PackStats(examples=6, sequences=3, tokens=23, truncated=0, dropped=0, capacity=24)
    assert stats.fill == 23 / 24


def test_longer_examples_are_truncated_and_untrainable_ones_dropped() -> None:
    rows = examples([12, 3, 0, 2])
    rows["labels"][3] = [M, M]  # nothing to train
    rows["labels"][0] = [M] * 6 + rows["input_ids"][0][6:]  # trains from token 6 on
    packed, stats = pack(rows, 4)
    assert (stats.truncated, stats.dropped, stats.examples) == (0, 3, 4)
    packed, stats = pack(rows, 8)
    assert (stats.truncated, stats.dropped) == (1, 2)
    assert packed["input_ids"][0] == list(range(8)) and packed["seq_lengths"] == [[8], [3]]


def test_arrow_columns_and_rows_pack_alike() -> None:
    import pyarrow as pa

    columns = examples([4, 9, 2, 6, 3, 3])
    as_dict, stats = pack(columns, 10)
    table, table_stats = pack(pa.table(columns), 10)
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    assert table.to_pydict() == as_dict == pack(rows, 10)[0]
    assert table_stats == stats
    assert {f.name: str(f.type.value_type) for f in table.schema} == PACKED_TYPES
    sliced, _ = pack(pa.table(columns).slice(2), 10)  # an Arrow batch that starts inside its buffers
    assert sliced.to_pydict() == pack({k: v[2:] for k, v in columns.items()}, 10)[0]


def test_training_features_pack(good: Path) -> None:
    features = TrainingFeatures(good)
    table, _, _ = features.batch_table(*features.render_batch(CONVERSATIONS * 3))
    lengths = [len(row) for row in table.column("input_ids").to_pylist()]
    packed, stats = pack(table, max(lengths) + 10)
    assert stats.tokens == sum(lengths) and stats.dropped == stats.truncated == 0
    assert sorted(n for row in packed.column("seq_lengths").to_pylist() for n in row) == sorted(lengths)
    trained = sum(label != M for row in packed.column("labels").to_pylist() for label in row)
    assert trained == sum(label != M for row in table.column("labels").to_pylist() for label in row)


def test_empty_input_and_a_bad_seq_len() -> None:
    packed, stats = pack(examples([]), 8)
    assert packed == {name: [] for name in PACKED_TYPES} and stats == PackStats()
    with pytest.raises(UsageError, match="seq_len must be at least 1"):
        pack(examples([3]), 0)
