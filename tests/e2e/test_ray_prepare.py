"""`prepare --engine ray` on a local Ray cluster and a real tokenizer (Llama 3.2 with its bundled template): the
same features, rows, counts and skipped-line report as the single-process run, for plain chats and OpenAI-format
tool data with one bad line; and the CLI joining the cluster refuses a run past --max-skipped naming the line.

Ray is an optional extra (`pip install 'hf-chat-templates[ray]'`); without it these tests are skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hf_chat_templates import install, prepare
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import CONVERSATIONS, write_jsonl

ray = pytest.importorskip("ray")

# OpenAI-format tool data as a chat API logs it: JSON-string arguments, a call id, the tool result answering it
TOOL_CALL = {
    "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
        {"role": "assistant", "content": "21 °C in Paris."},
    ],
    "tools": CONVERSATIONS[2]["tools"],
}
BAD_LINE = 34


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster of 2 CPUs for the module (a short temp folder: Ray's socket paths have a length limit)."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def llama(llama3_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ray") / "llama"
    install("llama3.2-pythonic", llama3_base, out)
    return out


def _data(path: Path) -> Path:
    lines = [json.dumps(c) for c in (*CONVERSATIONS, TOOL_CALL)] * 10
    lines.insert(BAD_LINE - 1, '{"messages": [{"role": "user", "content": "cut off')
    return write_jsonl(path, lines)


def _columns(folder: Path) -> tuple[object, dict[str, list]]:
    from datasets import load_from_disk

    dataset = load_from_disk(str(folder))
    return dataset.features, dataset[:]


def test_ray_gives_the_features_and_report_of_the_local_run(cluster: str, llama: Path, tmp_path: Path) -> None:
    from hf_chat_templates.training.distributed import prepare_on_ray

    data = _data(tmp_path / "c.jsonl")
    local = prepare(llama, data, tmp_path / "local", max_skipped=1)
    # small shards: the bad line sits in a later shard, numbered from the lines of the shards before it
    distributed = prepare_on_ray(llama, data, tmp_path / "ray", max_skipped=1, shard_bytes=2048)
    assert len(list((tmp_path / "ray").glob("data-*.arrow"))) > 3

    local_features, local_rows = _columns(tmp_path / "local")
    ray_features, ray_rows = _columns(tmp_path / "ray")
    assert ray_features == local_features
    assert ray_rows == local_rows  # input_ids, attention_mask, labels: every row, in input order
    masks = [[label != IGNORE_INDEX for label in labels] for labels in ray_rows["labels"]]
    assert all(any(mask) for mask in masks) and len(masks) == 40  # each row trains its assistant turns

    expected, got = local.to_dict(), distributed.to_dict()
    assert got.pop("output") != expected.pop("output")
    # each worker has its own segment cache: the same lookups, not the same hits
    cache, local_cache = got.pop("segment_cache", {}), expected.pop("segment_cache", {})
    assert (cache.get("lookups"), cache.get("tokens")) == (local_cache.get("lookups"), local_cache.get("tokens"))
    assert got == expected
    assert got["bad_lines"] == [{"line": BAD_LINE, "reason": got["bad_lines"][0]["reason"]}]
    assert got["bad_lines"][0]["reason"].startswith("not JSON")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # staging and lock cleaned up


def test_the_cli_joins_the_cluster_and_refuses_past_max_skipped(cluster: str, llama: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    _data(folder / "b.jsonl")
    local = prepare(llama, folder / "b.jsonl", tmp_path / "local", max_skipped=0)
    args = ["prepare", str(llama), "--conversations", str(folder), "--output", str(tmp_path / "out"), "--json"]
    args += ["--engine", "ray", "--ray-address", cluster, "--num-cpus", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "hf_chat_templates", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["output"] == "" and not (tmp_path / "out").exists()
    assert report["records"] == local.records + len(CONVERSATIONS)
    assert report["bad_lines"] == [{"line": BAD_LINE, "reason": f"b.jsonl: {local.bad_lines[0][1]}"}]
    assert report["over_limit"].replace(str(report["records"]), "N") == local.over_limit.replace(
        str(local.records), "N"
    )
