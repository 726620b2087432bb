"""Row-level rules applied inside the stream, per micro-batch, as plain Spark expressions.

A rule is declared in the pipeline's catalog entry (`row_rules=(RowRule(...), ...)` in
`conf/pipelines/<P>.py`, checked by `spark_jobs.catalog.RowRule`) as a SQL condition over the
contract fields that is true for an acceptable row (null counts as acceptable, like a SQL CHECK),
and an action:

- `quarantine`: a violating row goes to quarantine with the reason `rule <name>`, like any reject;
- `fail`: a violation fails the micro-batch before anything is written (the query stops and the
  supervisor alerts) — for violations that mean a broken producer rather than one bad record.

Counts per rule, `dq_<name>`, are computed in one aggregate over the (cached) parsed batch,
logged with the batch id and put into the batch's progress row (`platform.stream_progress`,
column `row_rule_counts`) through `control.progress.note_batch_metrics`. (Spark observable
metrics attached inside foreachBatch do not reach the query's progress, hence this route.)
No Great Expectations here: the stream pays a few column expressions, nothing more.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from spark_jobs.catalog import RowRule
from spark_jobs.transforms import REASON

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)
CONTRACT_VALID = "_contract_valid"   # the row passed the contract (before any rule)


class RowRuleViolation(RuntimeError):
    """A `fail` rule was violated: the micro-batch must not be written."""


def metric_name(rule: RowRule) -> str:
    return f"dq_{rule.name}"


def violation(rule: RowRule) -> Column:
    """True where an otherwise valid row breaks the rule (a null condition is not a violation;
    a row the contract rejects already keeps its own reasons)."""

    return F.col(CONTRACT_VALID) & ~F.coalesce(F.expr(rule.condition), F.lit(True))


def with_rules(parsed: DataFrame, rules: tuple[RowRule, ...]) -> DataFrame:
    """The parsed batch (see `transforms.parse`) with every `quarantine` rule a row breaks added to
    its reject reason, so `transforms.rejects` and `transforms.valid` route it; `_contract_valid`
    remembers the contract's verdict (the silver and quarantine projections drop it)."""

    if not rules:
        return parsed
    marked = parsed.withColumn(CONTRACT_VALID, F.col(REASON).isNull())
    reasons = [F.when(violation(r), F.lit(f"rule {r.name}")) for r in rules if r.action == "quarantine"]
    if not reasons:
        return marked
    return marked.withColumn(REASON, F.nullif(F.concat_ws("; ", F.col(REASON), *reasons), F.lit("")))


def metrics(rules: tuple[RowRule, ...]) -> list[Column]:
    """One `dq_<name>` count of violating rows per rule."""

    return [F.count_if(violation(r)).alias(metric_name(r)) for r in rules]


def check(counts: dict[str, int], rules: tuple[RowRule, ...], *, pipeline: str, batch_id: int) -> None:
    """Log the batch's violation `counts` (from `metrics`) and raise `RowRuleViolation` when a
    `fail` rule is broken."""
    broken = [f"{r.name} ({counts.get(metric_name(r), 0)} row(s))" for r in rules
              if r.action == "fail" and counts.get(metric_name(r), 0)]
    if any(counts.values()):
        log.info("%s batch %d: row rules %s", pipeline, batch_id,
                 ", ".join(f"{k}={v}" for k, v in counts.items()))
    if broken:
        raise RowRuleViolation(f"{pipeline} batch {batch_id}: fail rule(s) broken: {', '.join(broken)}")
