"""The pipeline catalog: one typed, declarative entry per pipeline.

An entry names its source, its event contract (fields and rules), the row rules its stream applies
per micro-batch, its dedupe key, its derived and enrichment columns, its gold aggregation and its
restart policy. The stream, the back-fill, the
CLI and the DAGs are all generated from the entry; nothing pipeline-specific is hand-coded.
Entries live in `conf/pipelines/<name>.py` (or `$WEIR_CONF/pipelines`) as a module-level
`PIPELINE`; loading one is an import, never file parsing, so DAG files stay cheap to parse.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from spark_jobs.errors import UserError
from spark_jobs.settings import REPO_ROOT, settings

FieldType = Literal["string", "integer", "number", "timestamp"]
RuleAction = Literal["quarantine", "fail"]
RULE_ACTIONS: tuple[RuleAction, ...] = ("quarantine", "fail")
_RULE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class CatalogError(UserError, ValueError):
    """A catalog entry that cannot be used; the message names the entry and the part at fault."""

# A minute: fresh enough for downstream DAGs, and a stream committing every few seconds still
# costs Airflow one event (and one downstream run) per table per minute, not one per batch.
DEFAULT_ASSET_EVENT_INTERVAL_S = 60.0


@dataclass(frozen=True)
class Field:
    """One field of the JSON event contract and the rules a value must satisfy."""

    name: str
    type: FieldType = "string"
    required: bool = False
    allowed: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None

    def __post_init__(self) -> None:
        # An entry may list the allowed values in any collection; the contract holds a tuple, so
        # that it is hashable (the parse's expressions are built once per contract, see
        # `transforms.parse`).
        if self.allowed is not None and not isinstance(self.allowed, tuple):
            object.__setattr__(self, "allowed", tuple(self.allowed))


@dataclass(frozen=True)
class RowRule:
    """A row-level rule the stream and the back-fill apply per batch (`spark_jobs.quality.rules`):
    `condition` is Spark SQL over the contract fields, true (or null) for an acceptable row. A
    violating row is quarantined with the reason `rule <name>` (`quarantine`), or fails the batch
    before anything is written (`fail`: a broken producer rather than one bad record)."""

    name: str
    condition: str
    action: RuleAction = "quarantine"

    def __post_init__(self) -> None:
        # The name becomes a reject reason and the metric `dq_<name>`, hence the strict shape.
        if not isinstance(self.name, str) or not _RULE_NAME.match(self.name):
            raise CatalogError(f"row rule name must be lower_snake_case, not {self.name!r}")
        if not isinstance(self.condition, str) or not self.condition.strip():
            raise CatalogError(f"row rule {self.name}: condition must be a Spark SQL condition, "
                               f"not {self.condition!r}")
        if self.action not in RULE_ACTIONS:
            raise CatalogError(f"row rule {self.name}: action must be one of {', '.join(RULE_ACTIONS)}, "
                               f"not {self.action!r}")


INTERVAL = re.compile(r"(\d+(?:\.\d+)?) (millisecond|second|minute|hour|day)s?")
UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}


def interval_ms(text: str, *, positive: bool = False) -> int:
    """A catalog interval ("30 minutes", "1 second", "0 seconds") in milliseconds; `CatalogError`
    when `text` is not an amount of one of its units (or, with `positive`, is none)."""
    match = INTERVAL.fullmatch(text.strip()) if isinstance(text, str) else None
    ms = int(float(match.group(1)) * UNIT_MS[match.group(2)]) if match else -1
    if ms < 0 or (positive and ms == 0):
        raise CatalogError(f"{text!r} is not an interval such as '5 seconds' or '1 minute'")
    return ms


def positive(owner: str, *, optional: bool = False, **bounds: object) -> None:
    """Refuse a bound that is not a positive whole number (None too, unless `optional`)."""
    for name, value in bounds.items():
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            allowed = "a positive whole number" + (" or None" if optional else "")
            raise CatalogError(f"{owner}: {name} must be {allowed}, not {value!r}")


@dataclass(frozen=True)
class FileSource:
    """JSON-lines files dropped (complete, by rename) into `WEIR_HOME/landing/<pipeline>/`, read
    by Weir's landing reader (`spark_jobs.landing`): line by line, never a whole file in memory.

    A micro-batch takes at most `max_bytes_per_trigger` bytes of input (a larger file spans
    several batches), and at most `max_files_per_trigger` files when that is set; one task reads
    at most `max_bytes_per_partition`, and a batch is cut evenly over the cluster's cores in tasks
    of at least a megabyte (`spark_jobs.landing`). Memory is bounded by these, never by the
    input's size."""

    kind: Literal["files"] = "files"
    max_bytes_per_trigger: int = 128 << 20
    max_files_per_trigger: int | None = None
    max_bytes_per_partition: int = 16 << 20

    def __post_init__(self) -> None:
        positive("files source", max_bytes_per_trigger=self.max_bytes_per_trigger,
                 max_bytes_per_partition=self.max_bytes_per_partition)
        positive("files source", optional=True, max_files_per_trigger=self.max_files_per_trigger)


@dataclass(frozen=True)
class KafkaSource:
    """A Kafka topic. `bootstrap_servers` may be `local` (the development broker of infra/kafka);
    security settings come from the Airflow connection `connection` or the environment (see
    `spark_jobs.kafka.connection`), never from the catalog. `max_offsets_per_trigger` bounds a
    micro-batch (None: unbounded, an explicit opt-out); `max_records_per_partition` bounds one
    task's share of it, so a batch is read by more tasks than the topic has partitions (None: one
    task per partition, Spark's default); `fail_on_data_loss=False` is an explicit opt-in to skip
    offsets that are gone (retention, deleted topic). `partitions` is used when `weir produce`
    creates the topic."""

    topic: str
    bootstrap_servers: str = "127.0.0.1:9092"
    starting_offsets: str = "earliest"
    # Bounded by default, so a backlog of any size (a new pipeline on a full topic, a reset to
    # earliest, days of downtime) is taken in batches whose memory is known. 500k records of about
    # 250 bytes are about the files source's 128 MB bound, within the default driver memory on 2
    # cores (the driver's peak RSS did not move from 200k); records of a few KB want a lower bound.
    # Fewer batches pay the fixed cost of a micro-batch less often: the bench's 1 M records took
    # 33.1-35.0 s of ingest in batches of 500k, 42.4-44.2 s in batches of 200k (docs/performance.md).
    max_offsets_per_trigger: int | None = 500_000
    # For a cluster with more cores than the topic has partitions: a task reads at most this many
    # records, so a batch is read by more tasks than the topic's partitions (and every stage after
    # the read keeps that many). On 2 cores and 3 partitions it changed nothing: 50k-record tasks
    # (6 per 200k batch) took 39.0-42.7 s of ingest for 1 M records, one task per partition
    # 39.1-42.0 s (docs/performance.md). None: Spark's default, one task per topic partition.
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    connection: str | None = None
    partitions: int = 3
    kind: Literal["kafka"] = "kafka"

    def __post_init__(self) -> None:
        # 0 must not read as "unbounded": the opt-out is None, written on purpose.
        positive(f"kafka source {self.topic}", optional=True,
                 max_offsets_per_trigger=self.max_offsets_per_trigger,
                 max_records_per_partition=self.max_records_per_partition)
        positive(f"kafka source {self.topic}", partitions=self.partitions)


@dataclass(frozen=True)
class Dimension:
    """A small dimension table joined onto silver by key (left join: unknown keys give nulls)."""

    table: str
    key: str
    columns: tuple[str, ...]
    seed_csv: str | None = None


@dataclass(frozen=True)
class Aggregation:
    """The gold table: event-time windows × group keys with SQL measures."""

    table: str
    window: str
    slide: str | None = None
    group_by: tuple[str, ...] = ()
    measures: dict[str, str] = field(default_factory=dict)
    explode: dict[str, str] = field(default_factory=dict)
    watermark: str = "10 minutes"


@dataclass(frozen=True)
class Sessions:
    """A keyed-state table: one row per `key` (a viewing session), kept current by the stream
    with event-time timers and recomputed by the back-fill with the same state function
    (`spark_jobs.sessions`). A session closes on its `end_event`, or times out when no event came
    for `gap` of event time; `watermark` bounds how late an event may still update it. The
    measures come from the named event types and columns (time to first frame runs from
    `start_event` to the first `first_frame_event`)."""

    table: str
    key: str = "session_id"
    gap: str = "30 minutes"
    watermark: str = "10 minutes"
    start_event: str = "start"
    first_frame_event: str = "heartbeat"
    end_event: str = "end"
    error_event: str = "error"
    rebuffer_event: str = "buffer_end"
    rebuffer_ms: str = "buffer_ms"
    bitrate_kbps: str = "bitrate_kbps"
    position_s: str = "position_s"
    # Columns carried onto the session row (the same for all events of a session).
    carry: tuple[str, ...] = ()


@dataclass(frozen=True)
class RestartPolicy:
    """Exponential backoff between restarts, and a restart budget per time window."""

    initial_backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    max_restarts: int = 5
    window_s: float = 3600.0
    stall_after_s: float = 120.0


@dataclass(frozen=True)
class Pipeline:
    name: str
    events_table: str
    fields: tuple[Field, ...]
    key: str
    event_time: str
    aggregation: Aggregation
    source: FileSource | KafkaSource = field(default_factory=FileSource)
    derived: dict[str, str] = field(default_factory=dict)
    dimension: Dimension | None = None
    trigger_interval: str = "5 seconds"
    # How often gold and the session table take silver's new rows; unset: at `trigger_interval`.
    # Each of their micro-batches has a fixed cost (its state store, a MERGE, its commits) on the
    # cores the ingest shares: a longer interval leaves them to the ingest, whose latency to
    # silver is what the trigger is for, and updates the derived tables less often.
    derived_trigger_interval: str | None = None
    # Gold's and the sessions' queries in a second process of the driver, at a lower CPU priority,
    # when its master is local (`spark_jobs.derived`): on a few cores their micro-batches otherwise
    # hold the cores the ingest needs, and delay silver by seconds. Costs a second JVM.
    derived_in_own_process: bool = False
    # An event stamped further ahead of its ingest time than this is quarantined: one wrong clock
    # must never carry the watermark into the future (which would make every later event late).
    max_event_time_ahead: str = "1 hour"
    shuffle_partitions: int = 4
    # A gold or sessions micro-batch reads at most this many bytes of silver's files (Delta's
    # `maxBytesPerTrigger`; at least one file). Silver's files hold about 40 bytes a row, a
    # seventh of the raw lines' bytes, so the default (about 1.7 M rows) spans three ingest
    # batches: a query that runs behind the ingest (a `--once` run over a backlog, a restart after
    # a long stop) catches up in bounded batches, not in Delta's 1,000 files at a time.
    silver_max_bytes_per_trigger: int = 64 << 20
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    # How often Airflow looks for new commits of the pipeline's tables: each table's asset gets at
    # most one event per interval, however many micro-batches committed meanwhile.
    asset_event_interval_s: float = DEFAULT_ASSET_EVENT_INTERVAL_S
    # The freshness deadline: gold not advancing for this long while the stream runs fires one
    # alert (event log `freshness`, the alert sink) per gold version (spark_jobs.control.freshness).
    gold_freshness_alert_s: float = 1800.0
    description: str = ""
    owner: str = "data-platform"
    row_rules: tuple[RowRule, ...] = ()
    sessions: Sessions | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):   # a list in the entry: as for `Field.allowed`
            object.__setattr__(self, "fields", tuple(self.fields))
        positive(f"pipeline {self.name}", silver_max_bytes_per_trigger=self.silver_max_bytes_per_trigger)
        for name in ("trigger_interval", "derived_trigger_interval"):
            value = getattr(self, name)
            if value is not None or name == "trigger_interval":
                try:
                    interval_ms(value, positive=True)
                except CatalogError as err:
                    raise CatalogError(f"pipeline {self.name}: {name}: {err}") from None
        # Checked here, not when the first batch runs: a rule's count is the column `dq_<name>`
        # of one aggregate, so two rules of one name would fail every batch of a running stream.
        if not isinstance(self.row_rules, tuple) or not all(isinstance(r, RowRule) for r in self.row_rules):
            raise CatalogError(f"pipeline {self.name}: row_rules must be a tuple of RowRule")
        names = [r.name for r in self.row_rules]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise CatalogError(f"pipeline {self.name}: row rule(s) declared twice: {', '.join(doubled)}")

    def trigger_of(self, query: str) -> str:
        """The processing-time trigger of the named query (`topology.queries_of`)."""
        return self.trigger_interval if query == "ingest" else (
            self.derived_trigger_interval or self.trigger_interval)

    @property
    def gold_table(self) -> str:
        return self.aggregation.table


class UnknownPipelineError(UserError, LookupError):
    pass


def catalog_dir() -> Path:
    """Where the entries are: `WEIR_CONF/pipelines` (default: the checkout's `conf/pipelines`)."""
    return settings().conf / "pipelines"


def names() -> list[str]:
    return sorted(p.stem for p in catalog_dir().glob("*.py") if not p.stem.startswith("_"))


def load(name: str) -> Pipeline:
    """The catalog entry of pipeline `name` (from this process's `WEIR_CONF`)."""
    return _load(catalog_dir(), name)


@cache
def _load(folder: Path, name: str) -> Pipeline:
    # Keyed by folder too: a process that changes WEIR_CONF (a test) gets that catalog's entry.
    path = folder / f"{name}.py"
    if not path.is_file():
        known = ", ".join(names()) or "none"
        raise UnknownPipelineError(f"no pipeline {name!r} in the catalog (known: {known})")
    spec = importlib.util.spec_from_file_location(f"weir_catalog_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except CatalogError as err:
        raise CatalogError(f"{path}: {err}") from None
    pipeline = getattr(module, "PIPELINE", None)
    if not isinstance(pipeline, Pipeline) or pipeline.name != name:
        raise UnknownPipelineError(f"{path} must define PIPELINE = Pipeline(name={name!r}, ...)")
    return pipeline


def derived_entry(folder: Path, entry: str, *, base: str = "playback", **fields: str) -> Path:
    """Write the entry `entry` into the catalog folder `folder` (for `WEIR_CONF`): the checkout's
    entry `base` (`conf/pipelines`) named `entry`, with each of `fields` replaced by its value,
    given as Python source (`FileSource`, `KafkaSource` and `RowRule` are in scope). A variant
    for one environment, a benchmark or a test, loaded like any entry by a driver. Returns
    `folder`."""
    pipelines = folder / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    real = REPO_ROOT / "conf" / "pipelines" / f"{base}.py"
    what = ", ".join(fields) or "nothing"
    replaced = "".join(f",\n    {name}={value}"
                       for name, value in {"name": repr(entry), **fields}.items())
    (pipelines / f"{entry}.py").write_text(f'''"""Entry {entry}: {base} with {what} replaced."""
import dataclasses
import importlib.util

from spark_jobs.catalog import FileSource, KafkaSource, RowRule

_spec = importlib.util.spec_from_file_location("weir_real_{base}", {str(real)!r})
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
PIPELINE = dataclasses.replace(_real.PIPELINE{replaced})
''')
    return folder
