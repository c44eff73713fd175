"""The cache folder's records: what `keep` wrote is what `read_kept` reads, or nothing (missing, cut short, changed);
writers of the same record, threads included, never mix their bytes; no folder to write in keeps nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hf_chat_templates.tokenizer.cache_folder import keep, read_kept


def test_a_record_reads_back_or_not_at_all(tmp_path: Path) -> None:
    record = tmp_path / "cache" / "kind" / "name"
    assert read_kept(record) is None
    keep(record, b"payload")
    assert read_kept(record) == b"payload"
    record.write_bytes(record.read_bytes()[:-1])  # cut short
    assert read_kept(record) is None
    record.write_bytes(b"payload")  # not written by keep
    assert read_kept(record) is None
    keep(record, b"")
    assert read_kept(record) == b""


def test_writers_of_one_record_do_not_mix(tmp_path: Path) -> None:
    record = tmp_path / "r"
    payloads = [bytes([k]) * 200_000 for k in range(16)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: keep(record, p), payloads * 4))
    assert read_kept(record) in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["r"]  # no staged file left


def test_no_folder_to_write_in_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    keep(tmp_path / "file" / "kind" / "name", b"x")  # a file where the folder should be: no error
    assert read_kept(tmp_path / "file" / "kind" / "name") is None
