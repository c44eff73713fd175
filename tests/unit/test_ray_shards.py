"""`prepare --engine ray` without a cluster: the input cut into shards reads exactly as the local reader reads the
whole file (true line and row numbers), the shards' reports merge into the run's, and wrong input or options are
clear errors (exit 2) before any cluster starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates.conversations.records import open_conversations
from hf_chat_templates.errors import UsageError
from hf_chat_templates.training.dataset import MAX_LISTED, PrepareReport
from hf_chat_templates.training.distributed import _cause, check_engine, merge_shard, merge_shards
from hf_chat_templates.training.shards import Shard, ShardSource, input_files, plan_shards

from ..helpers import CONVERSATIONS, run, write_jsonl

GOOD_LINE = json.dumps(CONVERSATIONS[0])
# Lines the local reader reports or passes over: not JSON, not UTF-8, blank, CRLF, a byte-order mark
LINES = st.sampled_from(
    [
        GOOD_LINE.encode(),
        json.dumps(CONVERSATIONS[2]).encode(),
        b"{not json",
        b'{"messages": "\xff\xfe"}',
        b"",
        b"   ",
        GOOD_LINE.encode() + b"\r",
        b'{"messages": []}',
    ]
)


def _records_by_shards(path: Path, shard_bytes: int) -> list[tuple]:
    """Every shard's records, numbered as the driver numbers them: each shard's from the lines before it."""
    (files, kind) = input_files(path)
    found, covered = [], 0
    for shard in plan_shards(files, kind, shard_bytes):
        source = ShardSource(shard.path, shard.kind, start=shard.start, end=shard.end)
        found += [(where + covered, *rest) for where, *rest in source.records()]
        covered += source.covered[0]
    return found


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINES, max_size=30), bom=st.booleans(), last_newline=st.booleans(), step=st.integers(1, 400))
def test_jsonl_shards_read_as_the_whole_file(
    tmp_path: Path, lines: list[bytes], bom: bool, last_newline: bool, step: int
) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    assert _records_by_shards(path, step) == list(open_conversations(path).records())


def test_a_bad_line_deep_in_a_later_shard_keeps_its_true_number(tmp_path: Path) -> None:
    lines = [GOOD_LINE] * 40
    lines[33] = "{not json"
    path = write_jsonl(tmp_path / "c.jsonl", lines)
    shards = plan_shards([path], "jsonl", 300)
    assert len(shards) > 5 and shards[0].start == 0 and shards[-1].end == path.stat().st_size
    bad = [(where, why) for where, record, kind, why, *_ in _records_by_shards(path, 300) if kind]
    assert bad == [(34, "not JSON: Expecting property name enclosed in double quotes at column 2")]


def test_parquet_shards_are_row_groups_numbered_as_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"messages": c["messages"]} for c in CONVERSATIONS[:2]] * 10 + [{"messages": []}]
    path = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
    assert len(plan_shards([path], "parquet", 1)) == 7
    # a row's size is its share of the batch it was read in: only an estimate, for cutting batches
    without_size = [r[:4] + r[5:] for r in open_conversations(path).records()]
    assert [r[:4] + r[5:] for r in _records_by_shards(path, 1)] == without_size
    (*_, last) = _records_by_shards(path, 1)
    assert last[0] == 20 and last[2] == "normalize"


def _report(bad: list[tuple[int, str]], records: int) -> PrepareReport:
    report = PrepareReport(path="p", records=records, encoded=records - len(bad), tokens=10)
    for where, why in bad:
        report.note("read", where, why)
    return report


def test_merged_reports_number_lines_in_their_file_and_name_it(tmp_path: Path) -> None:
    shards = [
        Shard(0, str(tmp_path / "a.jsonl"), "jsonl", 0, 9, 0),
        Shard(1, str(tmp_path / "a.jsonl"), "jsonl", 9, 20, 0),
    ]
    shards.append(Shard(2, str(tmp_path / "sub" / "b.jsonl"), "jsonl", 0, 5, 1))
    results = {0: (_report([(2, "not JSON")], 3), 4), 1: (_report([(1, "x")], 2), 3), 2: (_report([(3, "y")], 3), 3)}
    report = PrepareReport(path="p")
    kept = merge_shards(report, shards, results, tmp_path)
    assert report.bad_lines == [(2, "a.jsonl: not JSON"), (5, "a.jsonl: x"), (3, "sub/b.jsonl: y")]
    assert report.tally.skipped["read"] == 3 and report.records == 8 and report.tokens == 30
    assert kept == ["shard-00000.arrow", "shard-00001.arrow", "shard-00002.arrow"]


def test_merged_lists_stop_at_the_listed_maximum_but_count_everything() -> None:
    report = PrepareReport(path="p")
    for _ in range(3):
        merge_shard(report, _report([(n, "bad") for n in range(1, 61)], 60), 0, "")
    assert len(report.bad_lines) == MAX_LISTED and report.tally.skipped["read"] == 180


@pytest.mark.parametrize(
    ("name", "setup", "message"),
    [
        ("c.json", lambda p: p.write_text("[]"), "a JSON file cannot be cut into shards"),
        ("export.data", lambda p: p.write_text(' [{"messages": []}]'), "a JSON file cannot be cut into shards"),
        ("missing.jsonl", lambda p: None, "no such file or folder"),
        ("empty", lambda p: p.mkdir(), "holds no JSONL or Parquet file"),
        ("mixed", lambda p: (p.mkdir(), (p / "a.jsonl").write_text(""), (p / "b.parquet").write_text("")), "mixes"),
        ("other", lambda p: (p.mkdir(), (p / "a.jsonl").write_text(""), (p / "notes.txt").write_text("")), "neither"),
        (
            "ds",
            lambda p: (p.mkdir(), (p / "state.json").write_text("{}"), (p / "dataset_info.json").write_text("{}")),
            "a datasets folder",
        ),
    ],
)
def test_input_the_ray_engine_cannot_read_is_a_clear_error(tmp_path: Path, name: str, setup, message: str) -> None:  # type: ignore[no-untyped-def]
    setup(tmp_path / name)
    with pytest.raises(UsageError, match=message) as caught:
        input_files(tmp_path / name)
    assert any(fix in (caught.value.hint or "") for fix in ("--engine local", "move it out", "one kind"))


def test_a_folder_skips_hidden_and_underscore_files(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    (folder / "part=1").mkdir(parents=True)
    for name in ("part=1/b.jsonl", "a.jsonl", "_SUCCESS", ".a.jsonl.crc"):
        (folder / name).write_text(GOOD_LINE + "\n")
    assert input_files(folder) == ([folder / "a.jsonl", folder / "part=1" / "b.jsonl"], "jsonl")


def test_options_of_one_engine_are_refused_by_the_other() -> None:
    with pytest.raises(UsageError, match="workers"):
        check_engine("ray", 2, None, None)
    with pytest.raises(UsageError, match="ray_address"):
        check_engine("local", None, "auto", None)
    with pytest.raises(UsageError, match="num_cpus"):
        check_engine("ray", None, None, 0)
    check_engine("ray", None, "auto", 4)
    check_engine("local", 2, None, None)


def test_without_ray_the_cli_names_the_extra(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    data = write_jsonl(tmp_path / "c.jsonl", [GOOD_LINE])
    code, _, err = run(
        capsys, "prepare", str(good), "--conversations", str(data), "--output", str(tmp_path / "o"), "--engine", "ray"
    )
    assert code == 2 and "Traceback" not in err
    assert "ray[data]" in err and "pip install 'hf-chat-templates[ray]'" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "ray", "--workers", "2"], "--workers sets the processes of --engine local"),
        (["--num-cpus", "2"], "--num-cpus is an option of --engine ray"),
        (["--engine", "ray", "--split", "test"], "--split"),
    ],
)
def test_the_cli_refuses_options_of_the_other_engine(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [GOOD_LINE])
    code, _, err = run(
        capsys, "prepare", str(good), "--conversations", str(data), "--output", str(tmp_path / "o"), *args
    )
    assert code == 2 and message in err and "Traceback" not in err


def test_a_workers_own_error_is_found_inside_rays_wrappers() -> None:
    own = UsageError("c.jsonl: cannot read", hint="check the path")

    class TaskError(Exception):  # as Ray's RayTaskError holds what the task raised
        cause = own

    wrapped = RuntimeError("UDF failed to process a data block")
    wrapped.__cause__ = TaskError("task failed")
    assert _cause(wrapped) is own
    assert _cause(RuntimeError("a worker died")) is None
