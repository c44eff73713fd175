"""`prepare --engine ray`: the same per-batch work as `prepare`, on a Ray cluster.

The input is cut into shards on the driver (`shards`: a JSONL or Parquet file, or a folder of them). Ray Data's
`map_batches` hands each shard to a worker, an actor that loads the tokenizer once, reads the shard with the local
engine's byte-exact reader and runs the local engine's own streaming step on it (`dataset._stream`: normalize,
render, encode, pack, write one Arrow file). The driver merges the shards' reports in input order, numbering each
record left out by its true line (row) in its file (and naming the file when there are several), applies the
local engine's rules (`--max-skipped`, nothing to train), and writes `state.json` and `dataset_info.json` listing
the Arrow files in input order: `datasets.load_from_disk` reads the rows, in the same order, with the same features
as a local run (with `pack`, sequences are packed within a shard as the local engine packs within a batch: the
examples are the same, their packing can differ). Everything is written in the staging folder of the one writer
(`outputs.staged_folder`: locked, renamed into place at the end, removed on failure), so on a cluster of several
machines the tokenizer, the input and the output's parent folder must be at the same path on every node (a shared
file system).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pickle
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..conversations.normalize import Normalizer, RecordTally, SkipLimit, over_limit
from ..conversations.records import open_conversations
from ..errors import HfChatTemplatesError, UsageError, missing_dependency, option
from ..families.registry import Family
from ..families.source import TemplateChoice, as_choice, choose_template
from ..outputs import check_output, check_outside, staged_folder
from .dataset import (
    MAX_LISTED,
    PrepareReport,
    _check_prepare_options,
    _features,
    _stream,
    _write_dataset_state,
    new_report,
    template_normalizer,
)
from .features import TrainingFeatures
from .shapes import CHECK_EVERY
from .shards import Shard, ShardSource, input_files, plan_shards, shard_size

ENGINES = ("local", "ray")
_LISTS = ("bad_lines", "unrendered", "skipped")
_SUMS = ("records", "tokens", "trained_tokens", "truncated", "encoded", "assistant_tokens", "control_spellings")
_STATS = ("packing", "segments", "shapes")


# ---- the workers ------------------------------------------------------------------------------------------------


def shard_file(index: int) -> str:
    return f"shard-{index:05d}.arrow"


class ShardWorker:
    """Ray Data's callable class: built once per actor (it loads the tokenizer), then called with batches of
    shards; each shard becomes one Arrow file in `folder` and a pickled (report, lines covered)."""

    def __init__(self, features: TrainingFeatures, normalizer: Normalizer, folder: str, settings: dict[str, Any]):
        self.features, self.normalizer, self.folder = features, normalizer, Path(folder)
        self.settings, self.pack = settings["source"], settings["pack"]
        self.state = features.state  # loaded here, once per actor, outside the render limits of each batch

    def run(self, shard: Shard) -> tuple[PrepareReport, int]:
        source = ShardSource(shard.path, shard.kind, **self.settings, start=shard.start, end=shard.end)
        report = PrepareReport(path=shard.path, pack=self.pack)
        _stream(self.features, self.normalizer, source, self.folder / shard_file(shard.index), report, (None, False))
        return report, source.covered[0]

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        names = ("index", "path", "kind", "start", "end", "file")
        shards = [
            Shard(*(v.item() if hasattr(v, "item") else v for v in row)) for row in zip(*(batch[n] for n in names))
        ]
        return {"index": [s.index for s in shards], "result": [pickle.dumps(self.run(s)) for s in shards]}


# ---- the driver -------------------------------------------------------------------------------------------------


def import_ray() -> Any:
    """Ray with Ray Data, or the error naming the extra to install."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise missing_dependency("ray[data]", "ray", "prepare --engine ray") from None
    return ray


def check_engine(engine: str, workers: int | None, ray_address: str | None, num_cpus: int | None) -> None:
    """The options of one engine are not given to the other: nothing is silently ignored."""
    if engine not in ENGINES:
        raise UsageError(
            f"engine {engine!r} is not one of {', '.join(ENGINES)}", hint="engine='ray'", parameter="engine"
        )
    if engine == "ray" and workers is not None:
        raise UsageError(
            f"{option('workers')} sets the processes of {option('engine')} local",
            hint=f"with {option('engine')} ray, {option('num_cpus')} N sets how many CPUs work",
            parameter="workers",
        )
    if engine == "local" and (ray_address is not None or num_cpus is not None):
        given = option("ray_address") if ray_address is not None else option("num_cpus")
        raise UsageError(
            f"{given} is an option of {option('engine')} ray",
            hint=f"add {option('engine')} ray, or use {option('workers')} N for worker processes here",
            parameter="ray_address" if ray_address is not None else "num_cpus",
        )
    if num_cpus is not None and num_cpus < 1:
        raise UsageError(
            f"{option('num_cpus')} {num_cpus}: at least 1", hint=f"{option('num_cpus')} 8", parameter="num_cpus"
        )


@contextlib.contextmanager
def ray_cluster(ray: Any, address: str | None, num_cpus: int | None) -> Iterator[int]:
    """The cluster to run on, and how many CPUs to use: Ray already initialized in this process as it is; else
    `address` joined ("auto": the cluster `ray start` runs on this machine), or a local cluster of `num_cpus` CPUs
    (default: all) started, and shut down at the end."""
    started = not ray.is_initialized()
    if not started and address is not None:  # a library caller's own cluster: the address would be ignored
        raise UsageError(
            f"Ray is already initialized in this process; {option('ray_address')} {address} would be ignored",
            hint=f"drop {option('ray_address')} to use the cluster this process joined, or call ray.shutdown() first",
            parameter="ray_address",
        )
    if started:
        try:
            ray.init(
                address=address,
                num_cpus=num_cpus if address is None else None,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except (ConnectionError, ValueError, RuntimeError) as err:
            if address is None:
                raise UsageError(
                    f"cannot start a local Ray cluster ({err})",
                    hint=f"start one with `ray start --head` and pass {option('ray_address')} auto",
                    parameter="ray_address",
                ) from None
            raise UsageError(
                f"{option('ray_address')} {address}: cannot join a Ray cluster ({err})",
                hint=f"start one with `ray start --head`, or leave out {option('ray_address')} to start a local one",
                parameter="ray_address",
            ) from None
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        yield max(1, min(cpus, num_cpus or cpus))
    finally:
        if started:
            ray.shutdown()


def _cause(err: BaseException) -> HfChatTemplatesError | None:
    """The package's own error a worker raised, out of Ray's wrappers."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, HfChatTemplatesError):
            return current
        seen.add(id(current))
        current = getattr(current, "cause", None) or current.__cause__ or current.__context__
    return None


def run_shards(
    ray: Any, shards: list[Shard], worker_args: tuple[Any, ...], cpus: int, progress: bool
) -> dict[int, Any]:
    """Every shard through `ShardWorker` on at most `cpus` actors: (report, lines covered) by shard index."""
    context = ray.data.DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, progress and context.enable_progress_bars
    items = [dataclasses.asdict(s) for s in shards]
    dataset = ray.data.from_items(items, override_num_blocks=len(shards)).map_batches(
        ShardWorker,
        fn_constructor_args=worker_args,
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=min(cpus, len(shards))),
        num_cpus=1,
    )
    try:
        rows = dataset.take_all()
    except Exception as err:  # Ray wraps what a worker raised: the package's own error is shown as itself
        cause = _cause(err)
        if cause is not None:
            raise cause from None
        raise
    finally:
        context.enable_progress_bars = bars
    return {int(row["index"]): pickle.loads(row["result"]) for row in rows}


def _shifted(items: Iterable[tuple[int, str]], offset: int, label: str) -> list[tuple[int, str]]:
    return [(where + offset, label + why) for where, why in items]


def merge_shard(report: PrepareReport, part: PrepareReport, offset: int, label: str) -> None:
    """A shard's report into the run's: its records numbered from `offset` and named by `label`."""
    for name in _SUMS:
        setattr(report, name, getattr(report, name) + getattr(part, name))
    for name in _STATS:  # dataclasses that add up with `+`
        setattr(report, name, getattr(report, name) + getattr(part, name))
    report.segments_off = report.segments_off or part.segments_off
    report.encoder_off = report.encoder_off or part.encoder_off
    report.shapes_off = report.shapes_off or part.shapes_off
    for name in _LISTS:
        listed = getattr(report, name)
        listed += _shifted(getattr(part, name), offset, label)[: MAX_LISTED - len(listed)]
    examples = {kind: _shifted(found, offset, label) for kind, found in part.tally.examples.items()}
    tally = RecordTally(dict(part.tally.skipped), examples, dict(part.tally.steps), part.tally.lossy)
    report.tally.add(tally)


def merge_shards(report: PrepareReport, shards: list[Shard], results: dict[int, Any], root: Path) -> list[str]:
    """Every shard's report into `report`, in input order; the Arrow files that hold rows, in order."""
    covered: dict[int, int] = {}
    several = len({s.file for s in shards}) > 1
    kept = []
    for shard in shards:
        part, lines = results[shard.index]
        offset = covered.get(shard.file, 0)
        covered[shard.file] = offset + lines
        label = f"{_relative(shard.path, root)}: " if several else ""
        merge_shard(report, part, offset, label)
        if part.encoded:
            kept.append(shard_file(shard.index))
    return kept


def _relative(path: str, root: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).relative_to(root))
    return path


def _publish_shards(staging: Path, kept: list[str]) -> None:
    """The shards holding rows renamed as `save_to_disk` names them, in order, the others removed; then the
    dataset's state."""
    names = [f"data-{i:05d}-of-{len(kept):05d}.arrow" for i in range(len(kept))]
    for empty in staging.glob("shard-*.arrow"):
        if empty.name not in kept:
            empty.unlink()
    for old, new in zip(kept, names):
        (staging / old).rename(staging / new)
    _write_dataset_state(staging, names)


def prepare_on_ray(
    source: str | Path,
    conversations: str | Path,
    output: str | Path,
    choice: TemplateChoice | str | Family | None = None,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    shard_bytes: int | None = None,
    max_length: int | None = None,
    force: bool = False,
    input_format: str = "auto",
    messages_column: str | None = None,
    tools_column: str = "tools",
    max_skipped: int | str = 0,
    train_on: str = "all",
    allow_control_tokens_in_content: bool = False,
    pack: int | None = None,
    progress: bool = False,
    exact: bool = False,
    check_every: int = CHECK_EVERY,
    per_turn: bool = False,
) -> PrepareReport:
    """`prepare` on a Ray cluster: the same features, rows in the same order and the same report, for a JSONL or
    Parquet file or a folder of them (`input_files`). `address` joins a cluster ("auto": the one running here;
    default: Ray already initialized in this process, else a local cluster of `num_cpus` CPUs, shut down after);
    `num_cpus` also caps the workers on a joined cluster. `shard_bytes` sets the shard size (default: about four
    shards per CPU, 1 to 64 MiB); `progress` shows Ray Data's progress bars. The other arguments are `prepare`'s."""
    ray = import_ray()
    _check_prepare_options(pack)
    check_engine("ray", None, address, num_cpus)
    limit = SkipLimit.parse(max_skipped)
    files, kind = input_files(conversations)
    # the settings checked as the local engine checks them
    first = open_conversations(
        files[0], input_format=input_format, messages_column=messages_column, tools_column=tools_column
    )
    settings = {"input_format": input_format, "messages_column": messages_column, "tools_column": tools_column}
    out = Path(output).absolute()
    check_output(out, force=force)
    check_outside(out, source, "the source tokenizer")
    check_outside(out, conversations, "the conversations folder")
    resolved = choose_template(source, as_choice(choice))
    training: dict[str, Any] = {
        "train_on": train_on,
        "allow_control_tokens_in_content": allow_control_tokens_in_content,
        "exact": exact,
        "check_every": check_every,
        "per_turn": per_turn,
    }
    cut_by = "--max-length"
    if pack is not None:
        cut_by = "--pack" if max_length is None or pack < max_length else cut_by
        max_length = min(max_length or pack, pack)
    features = _features(resolved, max_length, training)
    normalizer = template_normalizer(features)
    report = new_report(features, normalizer, (str(conversations), str(out), first.unit, limit.text), training, pack)
    report.cut_by = cut_by
    with ray_cluster(ray, address, num_cpus) as cpus:
        shards = plan_shards(files, kind, shard_bytes or shard_size(files, cpus))
        with staged_folder(out, force=force) as staging:
            worker_args = (features, normalizer, str(staging.path), {"source": settings, "pack": pack})
            results = run_shards(ray, shards, worker_args, cpus, progress)
            kept = merge_shards(report, shards, results, Path(conversations))
            report.over_limit = over_limit(report.tally, report.records, limit)
            if report.over_limit or not report.encoded:
                report.output = ""
                staging.discard()
            else:
                report.written = report.encoded
                _publish_shards(staging.path, kept)
    return report
