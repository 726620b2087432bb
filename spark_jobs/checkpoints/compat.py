"""`compat`: can the current code start on the pipeline's checkpoint and tables?

Before a deploy, the query plans the current code would run are compared with what the
checkpoint recorded: the sources (kind, Kafka topics, the Delta table a query reads), the
stateful operators (their number, state key and value schemas), the shuffle partitions pinned in
the offset log, and the output tables' schemas. The answer is the worst of:

- `compatible`: start it (`on_start` says what the start itself will redo: a sessions checkpoint
  of the Python state function is replaced, its table rebuilt from silver);
- `needs state reset`: Spark would refuse or silently misbehave on this checkpoint, but the tables
  are fine — `weir checkpoint reset P --from earliest` (replay is idempotent) then start;
- `needs full refresh`: the tables themselves no longer fit the code — rebuild them (runbook
  "full refresh").
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError

from spark_jobs import queries, sessions, topology
from spark_jobs.catalog import KafkaSource
from spark_jobs.checkpoints import layout
from spark_jobs.layers import PipelineTables, output_schemas, read_dimension
from spark_jobs.tables import delta_version

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
VERDICTS = ("compatible", "needs state reset", "needs full refresh")
STATEFUL_NODES = frozenset({"Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "Join",
                            "FlatMapGroupsWithState", "TransformWithState", "TransformWithStateInPySpark"})


# A keyed-state operator's state variables: name → (key fields, value fields), as (name, type).
StateSchemas = dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]]


@dataclass(frozen=True)
class Reason:
    verdict: str
    query: str
    text: str


@dataclass
class CodePlan:
    """What the current code's streaming query looks like."""

    sources: list[str]
    stateful: list[dict[str, Any]]


def simple_type(data_type: Any) -> str:
    """A Spark JSON data type (from a state schema file) as Spark's `simpleString`."""
    names = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
    if isinstance(data_type, str):
        return names.get(data_type, data_type)
    kind = data_type.get("type")
    if kind == "struct":
        fields = ",".join(f"{f['name']}:{simple_type(f['type'])}" for f in data_type["fields"])
        return f"struct<{fields}>"
    if kind == "array":
        return f"array<{simple_type(data_type['elementType'])}>"
    if kind == "map":
        return f"map<{simple_type(data_type['keyType'])},{simple_type(data_type['valueType'])}>"
    return str(kind)


def checkpoint_state_schemas(operator: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
    """(key fields, value fields) recorded in a state operator's schema file, or None."""
    for partition in layout.state_partitions(operator):
        schema_file = operator / str(partition) / "_metadata" / "schema"
        if schema_file.is_file():
            break
    else:
        return None
    text = schema_file.read_bytes().decode("latin-1")
    decoder, found, at = json.JSONDecoder(), [], 0
    while len(found) < 2:
        start = text.find('{"type":"struct"', at)
        if start < 0:
            break
        schema, end = decoder.raw_decode(text, start)
        found.append([(f["name"], simple_type(f["type"])) for f in schema["fields"]])
        at = end
    return (found[0], found[1]) if len(found) == 2 else None


def keyed_state_schemas(operator: Path) -> StateSchemas:
    """State variable → (key fields, value fields), from the newest schema file of a
    `transformWithState` operator (`state/<op>/_stateSchema/default/<batch>_<uuid>`): a binary
    file whose variable names each precede their key and value schemas as JSON."""
    folder = operator / "_stateSchema" / "default"
    files = sorted((f for f in folder.glob("[0-9]*_*") if not f.name.endswith(".crc")),
                   key=lambda f: int(f.name.split("_", 1)[0])) if folder.is_dir() else []
    if not files:
        return {}
    text = files[-1].read_bytes().decode("latin-1")
    decoder, out, at = json.JSONDecoder(), {}, 0
    while True:
        start = text.find('{"type":"struct"', at)
        if start < 0:
            return out
        names = re.findall(r"[$A-Za-z_][$\w]*", text[at:start])
        key, end = decoder.raw_decode(text, start)
        value_start = text.find('{"type":"struct"', end)
        if value_start < 0 or not names:
            return out
        value, at = decoder.raw_decode(text, value_start)
        out[names[-1]] = ([(f["name"], simple_type(f["type"])) for f in key["fields"]],
                          [(f["name"], simple_type(f["type"])) for f in value["fields"]])


def code_plan(df: DataFrame) -> CodePlan:
    """Streaming sources and stateful operators of a streaming DataFrame's analyzed plan."""
    plan = CodePlan([], [])

    def named(expression: Any) -> tuple[str, str]:
        try:
            name = expression.name()
        except Exception:
            name = expression.sql()
        return str(name), str(expression.dataType().simpleString())

    def buffers(expression: Any, seen: set[str], out: list[tuple[str, str]]) -> None:
        if expression.getClass().getSimpleName() == "AggregateExpression":
            canonical = expression.canonicalized().toString()
            if canonical not in seen:
                seen.add(canonical)
                attrs = _buffer_attributes(expression.aggregateFunction())
                out.extend(named(attrs.apply(i)) for i in range(attrs.size()))
            return
        children = expression.children()
        for i in range(children.size()):
            buffers(children.apply(i), seen, out)

    def walk(node: Any) -> None:
        name = node.nodeName()
        if name.startswith("StreamingRelation"):
            plan.sources.append(str(node.sourceName()))
        if name in STATEFUL_NODES and node.isStreaming():
            info: dict[str, Any] = {"operator": name}
            if name == "Aggregate":
                keys = node.groupingExpressions()
                info["key"] = [named(keys.apply(i)) for i in range(keys.size())]
                value: list[tuple[str, str]] = []
                aggregates, seen = node.aggregateExpressions(), set()
                for i in range(aggregates.size()):
                    buffers(aggregates.apply(i), seen, value)
                info["value"] = value
            plan.stateful.append(info)
        children = node.children()
        for i in range(children.size()):
            walk(children.apply(i))

    walk(df._jdf.queryExecution().analyzed())
    plan.stateful.reverse()      # operator ids are given bottom-up
    return plan


def _buffer_attributes(function: Any) -> Any:
    """The aggregation buffer of an aggregate function; a runtime-replaceable one (count_if,
    every, ...) keeps the buffer of the function it is replaced by."""

    for _ in range(5):
        try:
            return function.aggBufferAttributes()
        except Py4JJavaError:
            function = function.replacement()
    return function.aggBufferAttributes()


def current_queries(spark: SparkSession, home: WeirHome, pipeline: Pipeline) -> dict[str, DataFrame]:
    """The streaming DataFrames the current code runs (as `stream.start_query` builds them)."""

    tables = PipelineTables.of(home, pipeline)
    out = {"ingest": queries.ingest(spark, pipeline, home)}
    if DeltaTable.isDeltaTable(spark, str(tables.silver)):     # gold reads silver once it exists
        out["gold"] = queries.gold(spark, pipeline, tables)
        if "sessions" in topology.queries_of(pipeline):
            out["sessions"] = queries.sessions(spark, pipeline, tables)
    return out


def code_state_variables(pipeline: Pipeline) -> StateSchemas:
    """The keyed state the sessions query's processor declares: variable → (key, value) fields."""

    assert pipeline.sessions is not None
    value = sessions.state_schema(pipeline.sessions)
    return {sessions.STATE_NAME: ([(pipeline.sessions.key, "string")],
                                  [(f.name, f.dataType.simpleString()) for f in value.fields])}


def delta_table_id(table: Path) -> str | None:
    """The id of a Delta table (its `metaData.id`), from the log; it changes when the table is
    re-created, which is what a Delta stream source's checkpoint remembers."""
    log_dir = table / "_delta_log"
    for commit in sorted(log_dir.glob("*.json")) if log_dir.is_dir() else []:
        for line in commit.read_text(encoding="utf-8").splitlines():
            action = json.loads(line) if line.strip() else {}
            if "metaData" in action:
                return str(action["metaData"].get("id"))
    return None


def _source_kind(offset: Any) -> str:
    if isinstance(offset, dict) and {"manifest", "file", "byte"} <= offset.keys():
        return "files"
    if isinstance(offset, dict) and "logOffset" in offset:
        return "spark file source (before Weir's landing reader)"
    if isinstance(offset, dict) and "reservoirVersion" in offset:
        return "delta"
    if isinstance(offset, dict):
        return "kafka"
    return "unknown"


def compare_query(query: str, query_dir: Path, code: CodePlan, pipeline: Pipeline,
                  expected_sources: list[dict[str, Any]]) -> list[Reason]:
    reasons: list[Reason] = []
    found = layout.last_readable(query_dir / "offsets")
    if found is None:
        return reasons
    entry = layout.read_offsets(query_dir, found[0])
    recorded = [s for s in entry.sources if s is not None]
    if len(recorded) != len(code.sources):
        reasons.append(Reason("needs state reset", query,
                              f"the code reads {len(code.sources)} source(s), "
                              f"the checkpoint {len(recorded)}"))
    for offset, expected in zip(recorded, expected_sources, strict=False):
        kind = _source_kind(offset)
        if kind != expected["kind"]:
            verdict = "needs full refresh" if query == "ingest" else "needs state reset"
            reasons.append(Reason(verdict, query, f"source changed from {kind} to {expected['kind']}: "
                                  "record identities (bronze keys) change with it"))
        elif kind == "kafka" and set(offset) != set(expected.get("topics", set(offset))):
            reasons.append(Reason("needs state reset", query,
                                  f"Kafka topics changed from {sorted(offset)} to "
                                  f"{sorted(expected['topics'])}"))
        elif (kind == "delta" and expected.get("table_id")
              and offset.get("reservoirId") != expected["table_id"]):
            reasons.append(Reason("needs state reset", query,
                                  f"the Delta table it reads was re-created (id {offset.get('reservoirId')} "
                                  f"in the checkpoint, {expected['table_id']} now)"))
    operators = layout.state_operators(query_dir)
    if len(operators) != len(code.stateful):
        reasons.append(Reason("needs state reset", query,
                              f"{len(code.stateful)} stateful operator(s) in the code, "
                              f"{len(operators)} in the checkpoint"))
    for operator, info in zip(operators, code.stateful, strict=False):
        if "state_variables" in info:
            reasons += _keyed_state_reasons(query, operator, info["state_variables"])
            continue
        schemas = checkpoint_state_schemas(operator)
        if schemas is None or "key" not in info:
            continue
        key, value = schemas
        if key != info["key"]:
            reasons.append(Reason("needs state reset", query,
                                  f"state key of operator {operator.name} changed: "
                                  f"checkpoint {_fields(key)}, "
                                  f"code {_fields(info['key'])}"))
        if value != info["value"]:
            reasons.append(Reason("needs state reset", query,
                                  f"state value of operator {operator.name} changed (measures): checkpoint "
                                  f"{_fields(value)}, code {_fields(info['value'])}"))
    pinned = entry.conf.get("spark.sql.shuffle.partitions")
    if operators and pinned is not None and int(pinned) != pipeline.shuffle_partitions:
        reasons.append(Reason("needs state reset", query,
                              f"shuffle partitions: the checkpoint pins {pinned}, the pipeline sets "
                              f"{pipeline.shuffle_partitions} (Spark keeps {pinned} until the state "
                              "is reset)"))
    return reasons


def _keyed_state_reasons(query: str, operator: Path,
                         code: StateSchemas) -> list[Reason]:
    """A `transformWithState` operator whose state variables' schemas differ from the code's:
    Spark would refuse the restart (or read the old rows with the new layout)."""
    recorded = keyed_state_schemas(operator)
    if not recorded:
        return []
    reasons = []
    for name, (key, value) in code.items():
        if name not in recorded:
            reasons.append(Reason("needs state reset", query, f"state variable {name} of operator "
                                  f"{operator.name} is not in the checkpoint (it has "
                                  f"{', '.join(sorted(recorded)) or 'none'})"))
            continue
        old_key, old_value = recorded[name]
        if old_key != key:
            reasons.append(Reason("needs state reset", query,
                                  f"state key of {name} (operator {operator.name}) changed: "
                                  f"checkpoint {_fields(old_key)}, code {_fields(key)}"))
        if old_value != value:
            reasons.append(Reason("needs state reset", query,
                                  f"state schema of {name} (operator {operator.name}) changed: "
                                  f"checkpoint {_fields(old_value)}, code {_fields(value)}"))
    return reasons


def _fields(fields: list[tuple[str, str]]) -> str:
    return ", ".join(f"{n} {t}" for n, t in fields)


def _table_reasons(spark: SparkSession, home: WeirHome, pipeline: Pipeline) -> list[Reason]:
    """Output tables whose schema no longer matches what the code writes."""

    tables = PipelineTables.of(home, pipeline)
    dimension = read_dimension(spark, tables) if tables.dimension and tables.dimension.exists() else None
    schemas = output_schemas(spark, pipeline, dimension)
    reasons = []
    # bronze's columns only ever grow, and `ensure_tables` adds them (`add_missing_columns`)
    for layer, path in tables.outputs().items():
        if layer == "bronze" or delta_version(path) is None:
            continue
        schema = schemas[layer]
        table_schema = spark.read.format("delta").load(str(path)).schema
        have = [(f.name, f.dataType.simpleString()) for f in table_schema]
        want = [(f.name, f.dataType.simpleString()) for f in schema]
        if have != want:
            missing = [f"{n} {t}" for n, t in want if (n, t) not in have]
            extra = [f"{n} {t}" for n, t in have if (n, t) not in want]
            reasons.append(Reason("needs full refresh", layer,
                                  f"{layer} table schema differs from the code: code adds "
                                  f"[{', '.join(missing)}], table has [{', '.join(extra)}]"))
    return reasons


def compat(spark: SparkSession, home: WeirHome, pipeline: Pipeline) -> dict[str, Any]:
    """The verdict and its reasons for starting the current code on the pipeline's checkpoint."""

    tables = PipelineTables.of(home, pipeline)
    expected: dict[str, list[dict[str, Any]]] = {
        "ingest": [{"kind": pipeline.source.kind,
                    **({"topics": {pipeline.source.topic}}
                       if isinstance(pipeline.source, KafkaSource) else {})}],
        "gold": [{"kind": "delta", "table_id": delta_table_id(tables.silver)}],
        "sessions": [{"kind": "delta", "table_id": delta_table_id(tables.silver)}],
    }
    reasons: list[Reason] = []
    plans: dict[str, Any] = {}
    unchecked: dict[str, str] = {}
    on_start: dict[str, str] = {}
    try:
        queries = current_queries(spark, home, pipeline)
    except Exception as err:      # e.g. Kafka unreachable: say so rather than guess
        queries, unchecked["ingest"] = {}, f"could not build the query plan: {str(err).splitlines()[0]}"
    for query in topology.QUERIES:
        folder = topology.checkpoint_location(home, pipeline, query)
        if query not in queries:
            if folder.is_dir():
                unchecked.setdefault(query, "its input table does not exist yet")
            continue
        code = code_plan(queries[query])
        if query == "sessions":        # the processor's state is declared in Python, not the plan
            for info in code.stateful:
                info["state_variables"] = code_state_variables(pipeline)
        plans[query] = {"sources": code.sources, "stateful": code.stateful}
        if query == "sessions" and sessions.holds_python_state(folder):
            on_start[query] = ("the checkpoint holds the Python state function's state: the start backs "
                               "it up, rebuilds the session table from silver and starts the query afresh")
        elif folder.is_dir():
            reasons += compare_query(query, folder, code, pipeline, expected[query])
    reasons += _table_reasons(spark, home, pipeline)
    for query, why in unchecked.items():
        log.warning("%s compat: %s not checked: %s", pipeline.name, query, why)
    verdict = max((r.verdict for r in reasons), key=VERDICTS.index, default="compatible")
    log.info("%s compat: %s (%d reason(s))", pipeline.name, verdict, len(reasons))
    return {"pipeline": pipeline.name, "verdict": verdict, "compatible": verdict == "compatible",
            "reasons": [{"verdict": r.verdict, "query": r.query, "reason": r.text} for r in reasons],
            "unchecked": unchecked, "on_start": on_start, "code": plans}
