"""A pipeline's Delta tables: where they live and their schemas, derived from the transforms
themselves (run on empty input), so the tables and the code can never disagree."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.tables import (
    STATS_COLUMNS,
    add_missing_columns,
    delta_version,
    ensure_table,
    set_properties,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from spark_jobs.catalog import Pipeline


@dataclass(frozen=True)
class PipelineTables:
    bronze: Path
    silver: Path
    quarantine: Path
    gold: Path
    dimension: Path | None
    sessions: Path | None = None

    @classmethod
    def of(cls, home: WeirHome, pipeline: Pipeline) -> PipelineTables:
        dim = pipeline.dimension
        return cls(
            bronze=home.table("bronze", pipeline.events_table),
            silver=home.table("silver", pipeline.events_table),
            quarantine=home.table("quarantine", pipeline.events_table),
            gold=home.table("gold", pipeline.gold_table),
            dimension=home.table("dim", dim.table) if dim else None,
            sessions=home.table("gold", pipeline.sessions.table) if pipeline.sessions else None,
        )

    def outputs(self) -> dict[str, Path]:
        """Key → path of the tables the pipeline writes: bronze, silver, quarantine, gold and the
        session table (`sessions`) when declared. The one list the driver claims at start, a backup
        records, a rewind restores and a refresh plans; the dimension is an input, not in it."""
        out = {"bronze": self.bronze, "silver": self.silver, "quarantine": self.quarantine,
               "gold": self.gold}
        if self.sessions is not None:
            out["sessions"] = self.sessions
        return out

    def named(self) -> dict[str, Path]:
        """Key → path of every table of the pipeline: its outputs and its dimension (`dim`), as
        the Airflow assets declare them."""
        out = self.outputs()
        if self.dimension is not None:
            out["dim"] = self.dimension
        return out

    @staticmethod
    def layer(path: Path) -> str:
        """The layer a table lives in: its folder (the session table's is `gold`), the first part
        of the name analysts and the Airflow assets use (`gold.playback_sessions`)."""
        return path.parent.name


def read_dimension(spark: SparkSession, tables: PipelineTables) -> DataFrame | None:
    if tables.dimension is None:
        return None
    return spark.read.format("delta").load(str(tables.dimension))


def ensure_tables(spark: SparkSession, home: WeirHome, pipeline: Pipeline) -> PipelineTables:
    """Create the pipeline's tables (and seed its dimension) if they do not exist yet. A driver
    calls this at every start: when every table exists (the common case), no schema is derived."""
    from spark_jobs import transforms

    tables = PipelineTables.of(home, pipeline)
    if pipeline.dimension is not None and tables.dimension is not None:
        _seed_dimension(spark, tables.dimension, pipeline)
    missing = {key: path for key, path in tables.outputs().items() if delta_version(path) is None}
    properties = table_properties(pipeline)
    if missing:
        schemas = output_schemas(spark, pipeline, read_dimension(spark, tables))
        for key, path in missing.items():
            partition = "ingest_date" if key in ("bronze", "quarantine") else "event_date"
            ensure_table(spark, path, schemas[key], [partition], properties.get(key))
    # bronze created before `event_date_hint` existed: its old rows read it as null
    add_missing_columns(spark, tables.bronze, transforms.BRONZE_TABLE_SCHEMA)
    # tables created before a property of Weir's existed
    for key, path in tables.outputs().items():
        set_properties(spark, path, properties.get(key, {}))
    return tables


def skipping_order(pipeline: Pipeline) -> dict[str, tuple[str, ...]]:
    """Key (as in `PipelineTables.outputs`) → the columns the readers of that table skip its files
    by, in the order compaction sorts its files (`control.maintenance`): a stream batch looks its
    lines up in bronze and quarantine by (source, position), a back-fill reads the bronze files
    whose `event_date_hint` can hold its dates, silver, gold and the session table are read and
    merged by key."""
    from spark_jobs import sessions, transforms  # Spark's: not in the Airflow process's imports

    line = transforms.BRONZE_KEY
    order = {"bronze": (transforms.EVENT_DATE_HINT, *line), "quarantine": line,
             "silver": (pipeline.key,), "gold": transforms.gold_key(pipeline)}
    if pipeline.sessions is not None:
        order["sessions"] = sessions.table_key(pipeline)
    return order


def one_value_per_file() -> dict[str, str]:
    """Key → the column of which no file of that table holds two values: bronze's
    `event_date_hint`, so that a back-fill of one date reads that date's lines and no other's.
    The stream writes a batch that spans several dates a date per file (`transforms.by_hint`), and
    compaction keeps them apart (`control.maintenance`)."""
    from spark_jobs import transforms  # Spark's: not in the Airflow process's imports

    return {"bronze": transforms.EVENT_DATE_HINT}


def statistics_columns(pipeline: Pipeline) -> dict[str, tuple[str, ...]]:
    """Key → the columns whose per-file minimum, maximum and null count Delta keeps, for the tables
    written a row per input line: the columns their readers skip files by (`skipping_order`), and
    silver's event time, lineage and key hash.

    Delta keeps them for a table's first 32 columns by default: every column of Weir's, a line's
    whole text in bronze and every field of the contract in silver, at a cost paid on every write.
    The statistics of a column no reader filters on, or one whose values every file spans (a user
    id in files written in arrival order), skip nothing. Writing 497 k silver rows took 6.0 CPU-s
    with them and 3.4 without; 507 k bronze rows 3.4 and 2.9 (docs/performance.md). Gold and the
    session table are small, and keep every column's for the analysts' filters."""
    from spark_jobs import transforms  # Spark's: not in the Airflow process's imports

    order = skipping_order(pipeline)
    silver = (*order["silver"], pipeline.event_time, *transforms.LINEAGE, transforms.KEY_HASH)
    return {"bronze": order["bronze"], "quarantine": order["quarantine"],
            "silver": tuple(dict.fromkeys(silver))}


def table_properties(pipeline: Pipeline) -> dict[str, dict[str, str]]:
    """Key → the Delta properties `ensure_tables` gives that table of the pipeline beyond Weir's own
    for every table (`tables.WEIR_PROPERTIES`): the line tables' statistics columns."""
    return {key: {STATS_COLUMNS: ",".join(columns)}
            for key, columns in statistics_columns(pipeline).items()}


def output_schemas(spark: SparkSession, pipeline: Pipeline,
                   dimension: DataFrame | None) -> dict[str, StructType]:
    """Key (as in `PipelineTables.outputs`) → the schema the code writes there: the transforms'
    output on empty input, enriched from `dimension`."""
    from spark_jobs import transforms

    parsed = transforms.parse(spark.createDataFrame([], transforms.BRONZE_SCHEMA), pipeline)
    silver = transforms.silver(parsed, dimension, pipeline)
    schemas = {"bronze": transforms.BRONZE_TABLE_SCHEMA, "quarantine": transforms.rejects(parsed).schema,
               "silver": silver.schema, "gold": transforms.aggregate(silver, pipeline).schema}
    if pipeline.sessions is not None:
        schemas["sessions"] = session_schema(silver, pipeline)
    return schemas


def session_schema(silver: DataFrame, pipeline: Pipeline) -> StructType:
    """The session table's schema: the state function's rows over (empty) silver."""
    from spark_jobs import sessions

    return sessions.batch_rows(silver, pipeline, None).schema


def _seed_dimension(spark: SparkSession, path: Path, pipeline: Pipeline) -> None:
    dim = pipeline.dimension
    assert dim is not None
    if delta_version(path) is not None or dim.seed_csv is None:
        return
    with open(REPO_ROOT / dim.seed_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    columns = [dim.key, *dim.columns]
    df = spark.createDataFrame([[r[c] or None for c in columns] for r in rows],
                               ", ".join(f"{c} string" for c in columns))
    df.write.format("delta").mode("ignore").save(str(path))
