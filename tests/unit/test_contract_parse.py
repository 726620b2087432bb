"""The contract's parse in one pass of the JVM (`infra/jvm/weir/ContractParse.java`) against the
parse it replaced, Spark's own `from_json` and a dozen expressions per field, kept here as the
oracle: on thousands of hostile lines both give every row the same typed values and the same
reasons, word for word.

The oracle is Spark, not a second reading of the rules: a field's text is what `from_json` renders
(numbers, nested values, duplicate keys), presence is Spark's `trim`, shapes are `rlike`, typed
values are `try_to_timestamp` and `try_cast`. A change in any of them shows here first."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random

import pytest
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from spark_jobs import catalog, transforms
from spark_jobs.catalog import Field

T0 = dt.datetime(2026, 11, 20, 10, 0)
CORRUPT = "_corrupt_record"
LINE_CHECK = "_line_check"
ISO_8601 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$"
INTEGER = r"^-?\d+$"
NUMBER = r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$"


# ---- the oracle: the expression parse as it stood before ContractParse (git 3dd3a9c) ----

def _field_checks(f: Field, i: int) -> dict[str, Column]:
    raw = F.col(f"_raw.{f.name}")
    checks = {f"_present{i}": raw.isNotNull() & (F.trim(raw) != "")}
    if f.type == "timestamp":
        checks[f"_shape{i}"] = raw.rlike(ISO_8601)
    elif f.type in ("integer", "number"):
        checks[f"_shape{i}"] = raw.rlike(INTEGER if f.type == "integer" else NUMBER)
    return checks


def _field_reasons(f: Field, i: int) -> tuple[list[Column], Column]:
    raw = F.col(f"_raw.{f.name}")
    present = F.col(f"_present{i}")
    reasons: list[Column] = []
    if f.required:
        reasons.append(F.when(~present, F.lit(f"missing field {f.name}")))
    if f.type == "string":
        typed = F.when(present, raw)
    elif f.type == "timestamp":
        typed = F.col(f"_typed{i}")
        reasons.append(F.when(present & typed.isNull(),
                              F.concat(F.lit(f"bad timestamp {f.name}: "), raw)))
    else:
        well_formed = F.col(f"_shape{i}")
        typed = F.col(f"_typed{i}")
        reasons.append(F.when(present & ~well_formed, F.concat(
            F.lit(f"{f.name} is not {'an' if f.type == 'integer' else 'a'} {f.type}: "), raw)))
        in_range = typed.isNotNull()
        if f.minimum is not None:
            in_range = in_range & (typed >= F.lit(f.minimum))
        if f.maximum is not None:
            in_range = in_range & (typed <= F.lit(f.maximum))
        low = "" if f.minimum is None else transforms._num(f.minimum)
        high = "" if f.maximum is None else transforms._num(f.maximum)
        reasons.append(F.when(present & well_formed & ~in_range,
                              F.concat(F.lit(f"{f.name} out of range [{low}..{high}]: "), raw)))
    if f.allowed is not None:
        reasons.append(F.when(present & ~raw.isin(*f.allowed),
                              F.concat(F.lit(f"unknown {f.name}: "), raw)))
    return reasons, typed


def _typed(f: Field, i: int) -> Column | None:
    raw, ok = F.col(f"_raw.{f.name}"), F.col(f"_present{i}") & F.col(f"_shape{i}")
    if f.type == "timestamp":
        return F.when(ok, F.try_to_timestamp(raw))
    if f.type in ("integer", "number"):
        sql_type = "bigint" if f.type == "integer" else "double"
        return F.when(ok, F.expr(f"try_cast(_raw.`{f.name}` AS {sql_type})"))
    return None


def _strict_json_line_reason(line: str | None) -> str | None:
    """The line's own check as `weir.JsonLineReason` (Jackson's strict defaults) gave it: exactly
    one JSON object. Python's reading, exact for the lines of this module, which start with an
    object or are whole values; `test_transforms` pins the line's own reasons case by case."""
    if line is None:
        return None
    decoder = json.JSONDecoder(parse_constant=_refuse)
    text = line.strip(" \t\r\n")
    if not text:
        return None
    if not text.startswith("{"):
        try:
            decoder.decode(text)
        except ValueError:
            return "malformed JSON"
        return "malformed JSON: not an object"
    try:
        _, end = decoder.raw_decode(text)
    except (ValueError, RecursionError):
        return "malformed JSON"
    rest = text[end:].strip(" \t\r\n")
    if not rest:
        return None
    try:
        decoder.raw_decode(rest)
    except (ValueError, RecursionError):
        return "malformed JSON: trailing characters after the object"
    return "malformed JSON: more than one JSON value on the line"


def _refuse(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


def reference_parse(bronze: DataFrame, pipeline: catalog.Pipeline) -> DataFrame:
    """The expression parse of `bronze`, whose column `LINE_CHECK` holds each line's own check."""
    fields, event_time = pipeline.fields, pipeline.event_time
    max_ahead = pipeline.max_event_time_ahead
    value = F.col("value")
    structural = (
        F.when(value.isNull() | (F.trim(value) == ""), F.lit("empty line"))
        .when(F.length(value) > transforms.MAX_RECORD_CHARS,
              F.lit(f"record larger than {transforms.MAX_RECORD_CHARS} characters"))
        .when(F.col("raw_bytes").isNotNull(), F.lit("invalid UTF-8"))
        .otherwise(F.col(LINE_CHECK)))
    schema = StructType([StructField(f.name, StringType()) for f in fields]
                        + [StructField(CORRUPT, StringType())])
    read = (F.col("source").alias("_source"), F.col("position").alias("_position"),
            F.col("ingest_time").alias("_ingest_time"), F.col("raw_bytes").alias("_raw_bytes"), value,
            F.struct(*transforms.CARRIED_COLUMNS).alias(transforms.CARRIED),
            F.from_json(value, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
            .alias("_raw"),
            structural.alias("_structural"))
    numbered = list(enumerate(fields))
    checks = {name: c for i, f in numbered for name, c in _field_checks(f, i).items()}
    typed = {f"_typed{i}": t for i, f in numbered if (t := _typed(f, i)) is not None}
    typed_cols, field_reasons = [], []
    for i, f in numbered:
        reasons, value_of = _field_reasons(f, i)
        field_reasons.extend(reasons)
        if f.name == event_time:
            limit = F.col("_ingest_time") + F.expr(f"INTERVAL {max_ahead}")
            field_reasons.append(F.when(value_of > limit, F.concat(
                F.lit(f"{f.name} more than {max_ahead} ahead of ingest time: "), F.col(f"_raw.{f.name}"))))
        typed_cols.append(value_of.alias(f.name))
    structural = F.coalesce(F.col("_structural"), F.when(
        F.col(f"_raw.{CORRUPT}").isNotNull() | F.col("_raw").isNull(), F.lit("malformed JSON")))
    reason = F.coalesce(structural, F.nullif(F.concat_ws("; ", *field_reasons), F.lit("")))
    return (bronze.select(*read)
            .select("*", *[c.alias(n) for n, c in checks.items()])
            .select("*", *[c.alias(n) for n, c in typed.items()])
            .select(*map(F.col, transforms.LINEAGE), "value", "_raw_bytes", transforms.CARRIED,
                    *typed_cols, reason.alias(transforms.REASON)))


# ---- hostile lines ----

TEXTS = ["x", "", " ", "  ", "\t", " x ", "\n", "é", "\u2028", "a\"b", "\\", "null", "start", "Start",
         "1", "\ud83d\ude00", "NaN"]
NUMBERS = ["0", "-0", "1", "-1", "1.50", "1.0", "1e2", "1E400", "-1E400", "0.1e-400",
           "12345678901234567890123", "9223372036854775807", "9223372036854775808",
           "-9223372036854775808", "100000", "100001", "99999.5", "-1.25E+3", "0.5", "3.0e-5"]
NUMBER_TEXTS = ["1", "-0", " 1", "1 ", "1\n", "1\u2028", "+1", "1.", ".5", "-.5", "1e5", "0x10", "Infinity",
                "NaN", "1,000", "١", "99999999999999999999", "-", "1.2.3", "00012", "100000", "100000.0",
                "0.0", "-0.0"]
TIMESTAMPS = ["2026-11-20T10:00:05Z", "2026-11-20 10:00:05Z", "2026-11-20T10:00Z",
              "2026-11-20T10:00:05.123456789Z", "2026-11-20T10:00:05+01:00", "2026-11-20T10:00:05-0530",
              "2026-11-20T10:00:05+01", "2026-11-20T10:00:05", "2026-02-30T10:00:05Z", "2026-11-20T25:00:05Z",
              "2026-11-20T10:00:05Z\n", "2026-11-20T10:00:05Z\u2028", " 2026-11-20T10:00:05Z",
              "2026-11-20T10:00:05z", "20/11/2026 10:00", "2099-01-01T00:00:00Z", "2026-11-20T11:00:01Z",
              "2026-11-20T11:00:00Z", "0001-01-01T00:00:00Z", "2026-11-20T10:00:05.1234567890Z",
              "2026-11-20T10:00:05+25:00"]
RAW_VALUES = ["true", "false", "null", "{}", "[]", '{"x" : [1, 2.0 ,"é\\u00e9"]}',
              "[1.50, -0, {\"a\": null}]", '"\\ud800"', '"\\u0000"', '"\\t"', '"\\u0020"',
              '["\\ud800"]', "1E400", "-0", "1.50", "[[[[]]]]"]


def _value(rng: random.Random, f: Field) -> str:
    """A field's value as JSON text: often right, often wrong in one of many ways."""
    pick = rng.random()
    if pick < 0.25:
        return rng.choice(RAW_VALUES)
    if f.type == "timestamp":
        return json.dumps(rng.choice(TIMESTAMPS))
    if f.type in ("integer", "number"):
        return rng.choice(NUMBERS) if pick < 0.65 else json.dumps(rng.choice(NUMBER_TEXTS))
    if f.allowed is not None and pick < 0.7:
        return json.dumps(rng.choice(f.allowed))
    return json.dumps(rng.choice(TEXTS))


def _line(rng: random.Random, fields: tuple[Field, ...]) -> str:
    members = []
    for f in fields:
        if rng.random() < 0.12:
            continue  # absent
        name = f.name if rng.random() > 0.03 else f.name.upper()
        members.append(f'"{name}": {_value(rng, f)}')
        if rng.random() < 0.05:  # a duplicate key: the last one counts
            members.append(f'"{f.name}": {_value(rng, f)}')
    if rng.random() < 0.1:
        members.append('"extra": {"nested": [1, 2]}')
    rng.shuffle(members)
    line = "{" + ", ".join(members) + "}"
    shape = rng.random()
    if shape < 0.03:
        return line + " junk"
    if shape < 0.06:
        return line + line
    if shape < 0.08:
        return "[" + line + "]"
    if shape < 0.10:
        return line[: rng.randrange(1, len(line))]
    if shape < 0.12:
        return "  " + line + "\t "
    return line


STRUCTURAL = ["", " ", "\t", "\n", "{}", "[]", "null", "1", '"a"', "{'a': 1}", '{"a": 1} // c',
              '{"a": NaN}', '{"a": 01}', '{"a": 1}]', '{"a": 1},', '{"a": 1} {"b": 2}', '{"a": 1} 2',
              "{" * 1001 + "}" * 1001, '{"event_id": "' + "x" * 2000 + '"}', '{"a":"\\ud800"}',
              '{"a":["\\ud800"]}', '{"a":1', "{,}"]


def lines(fields: tuple[Field, ...], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return STRUCTURAL + [_line(rng, fields) for _ in range(count)]


BOUNDED = dataclasses.replace(
    catalog.load("playback"), name="bounded", fields=(
        Field("event_id", required=True),
        Field("event_time", "timestamp"),
        Field("score", "number", minimum=0.5, maximum=1e20),
        Field("count", "integer", minimum=-0.5, maximum=1e3, allowed=("1", "2", "-0", "1000")),
        Field("level", "integer", minimum=-(2**40), maximum=2**40),
        Field("kind", allowed=("a", "b", " ")),
        Field("at", "timestamp", required=True),
    ), max_event_time_ahead="30 minutes")


@pytest.mark.parametrize("pipeline", [catalog.load("playback"), catalog.load("hashtags"), BOUNDED],
                         ids=lambda p: p.name)
def test_the_one_pass_parse_gives_every_line_the_verdict_of_spark_expressions(spark, pipeline):
    texts = lines(pipeline.fields, 3000, seed=len(pipeline.name))
    bronze = spark.createDataFrame(
        [(t, "f", i, None, None, None, None, T0, T0.date(), None, None, _strict_json_line_reason(t))
         for i, t in enumerate(texts)],
        StructType([*transforms.BRONZE_SCHEMA.fields, StructField(LINE_CHECK, StringType())]))
    new = _rows(transforms.parse(bronze, pipeline))
    old = _rows(reference_parse(bronze, pipeline))
    assert new.keys() == old.keys() == set(range(len(texts)))
    differ = [(texts[p], old[p], new[p]) for p in sorted(new) if _verdict(new[p]) != _verdict(old[p])]
    assert not differ, f"{len(differ)} line(s) differ, the first: {differ[0]}"
    reasons = {r[transforms.REASON] for r in new.values()}
    kinds = {r.split(":")[0].split(" ")[0] for r in reasons if r}
    # the corpus reaches every kind of verdict (else it tests less than it seems)
    assert None in reasons
    assert {"malformed", "missing", "empty"} <= kinds
    assert len(reasons) > 100


def _rows(parsed: DataFrame) -> dict[int, dict]:
    """Each line's parse by position, every value as Spark's text of it (a timestamp of year 1
    is no Python datetime)."""
    as_text = parsed.select(*[F.col(c).cast("string").alias(c) for c in parsed.columns])
    return {int(r._position): r.asDict() for r in as_text.collect()}


def _verdict(row: dict) -> dict:
    """What a line's parse decides: its reason, and its typed values unless its text is not one
    JSON object that reads (then from_json's half-reading of it feeds nothing but bronze's date
    hint, where a line no back-fill may leave behind is read whatever its dates)."""
    if row[transforms.REASON] == "malformed JSON":
        return {transforms.REASON: "malformed JSON"}
    return row
