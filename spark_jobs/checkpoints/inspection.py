"""`inspect`: what a pipeline's checkpoint says, per query — where it is, the last committed
batch, a batch planned but not committed, the source position, the stateful operators with their
rows and size (Spark's `state-metadata` and `statestore` readers), files and bytes, and the
settings the offset log pins for the query's life."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from spark_jobs import landing_manifest, topology
from spark_jobs.checkpoints import layout
from spark_jobs.checkpoints.generations import current_generation

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
# The pinned settings worth showing first; the whole map is in the JSON output.
KEY_SETTINGS = (
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.aggregation.stateFormatVersion",
    "spark.sql.streaming.multipleWatermarkPolicy",
)


def describe_source(query_dir: Path, index: int, offset: Any, committed: int | None) -> dict[str, Any]:
    """A source position in words: files seen, Kafka offsets per partition, a Delta version."""
    if isinstance(offset, dict) and {"manifest", "file", "byte"} <= offset.keys():
        manifest = landing_manifest.read_entries(landing_manifest.manifest_dir(query_dir))
        done = manifest[:int(offset["file"])]
        return {"kind": "files", "files_seen": len(done) + (1 if offset["byte"] else 0),
                "files_discovered": len(manifest),
                "position": {"file": offset["file"], "byte": offset["byte"]},
                "newest_file": done[-1].path if done else None}
    if isinstance(offset, dict) and "reservoirVersion" in offset:
        return {"kind": "delta", "table_id": offset.get("reservoirId"),
                "version": offset.get("reservoirVersion"), "index": offset.get("index")}
    if isinstance(offset, dict) and offset and all(isinstance(v, dict) for v in offset.values()):
        return {"kind": "kafka", "offsets": {f"{topic}-{part}": off for topic, parts in offset.items()
                                             for part, off in parts.items()}}
    return {"kind": "unknown", "offset": offset}


def inspect_query(query_dir: Path, spark: SparkSession | None) -> dict[str, Any]:
    offsets = layout.batch_ids(query_dir / "offsets")
    committed = layout.last_committed(query_dir)
    latest = layout.last_readable(query_dir / "offsets")
    planned = offsets[-1] if offsets and (committed is None or offsets[-1] > committed) else None
    files, size = layout.folder_size(query_dir)
    out: dict[str, Any] = {
        "path": str(query_dir), "last_committed_batch": committed, "planned_uncommitted_batch": planned,
        "files": files, "bytes": size, "sources": [], "pinned_settings": {}, "watermark_ms": None,
        "state_operators": [],
    }
    if latest is not None:
        try:
            entry = layout.read_offsets(query_dir, latest[0])
            out["sources"] = [describe_source(query_dir, i, s, committed)
                              for i, s in enumerate(entry.sources)]
            out["pinned_settings"] = entry.conf
            out["watermark_ms"] = entry.watermark_ms
            out["batch_timestamp_ms"] = entry.timestamp_ms
        except (layout.LogFileError, ValueError) as err:
            out["offsets_error"] = str(err)
    out["state_operators"] = _state_operators(query_dir, spark)
    return out


def _state_operators(query_dir: Path, spark: SparkSession | None) -> list[dict[str, Any]]:
    operators: dict[int, dict[str, Any]] = {}
    for operator in layout.state_operators(query_dir):
        count, size = layout.folder_size(operator)
        operators[int(operator.name)] = {"operator_id": int(operator.name), "files": count, "bytes": size,
                                         "partitions": len(layout.state_partitions(operator))}
    if spark is None or not operators:
        return list(operators.values())
    try:
        # The state reader needs the driver's state store coordinator, which the streaming query
        # manager registers when it is first touched; a fresh CLI session has not touched it yet.
        spark.streams.active  # noqa: B018
        for row in spark.read.format("state-metadata").load(str(query_dir)).collect():
            info = operators.setdefault(row.operatorId, {"operator_id": row.operatorId})
            info.update(name=row.operatorName, store=row.stateStoreName, partitions=row.numPartitions,
                        min_batch=row.minBatchId, max_batch=row.maxBatchId)
        for op_id, info in operators.items():
            reader = (spark.read.format("statestore").option("operatorId", op_id)
                      .option("storeName", info.get("store") or "default"))
            if str(info.get("name", "")).startswith("transformWithState"):
                _keyed_state(reader, query_dir / "state" / str(op_id), info)
                continue
            state = reader.load(str(query_dir))
            info["rows"] = state.count()
            info["key_schema"] = state.schema["key"].dataType.simpleString()
    except Exception as err:  # a damaged checkpoint must still be inspectable from its files
        log.warning("state readers failed on %s: %s", query_dir, err)
        for info in operators.values():
            info.setdefault("error", str(err).splitlines()[0][:300])
    return list(operators.values())


def _keyed_state(reader: Any, operator: Path, info: dict[str, Any]) -> None:
    """Rows and schemas of each state variable of a `transformWithState` operator (Spark's state
    reader takes one variable at a time); its timers are internal and left out."""
    from spark_jobs.checkpoints.compat import keyed_state_schemas

    variables = {}
    for name in keyed_state_schemas(operator):
        if name.startswith("$") or name == "default":     # timers; the store's own column family
            continue
        state = reader.option("stateVarName", name).load(str(operator.parent.parent))
        variables[name] = {"rows": state.count(),
                           "key_schema": state.schema["key"].dataType.simpleString(),
                           "value_schema": state.schema["value"].dataType.simpleString()}
    info["state_variables"] = variables
    info["rows"] = sum(v["rows"] for v in variables.values())
    if len(variables) == 1:
        [only] = variables.values()
        info["key_schema"], info["value_schema"] = only["key_schema"], only["value_schema"]


def inspect(home: WeirHome, pipeline: Pipeline, spark: SparkSession | None = None) -> dict[str, Any]:
    """Every query of the pipeline's live checkpoint; state rows only when `spark` is given."""
    queries = {}
    for query in topology.QUERIES:
        folder = topology.checkpoint_location(home, pipeline, query)
        queries[query] = inspect_query(folder, spark) if folder.is_dir() else {
            "path": str(folder), "missing": True}
    return {"pipeline": pipeline.name, "generation": current_generation(home, pipeline.name),
            "queries": queries}
