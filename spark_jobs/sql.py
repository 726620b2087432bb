"""The analysts' door: every Delta table under WEIR_HOME registered by name (`layer.table`), so
plain Spark SQL works on them, time travel (`VERSION AS OF`, `TIMESTAMP AS OF`) included."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.home import WeirHome
from spark_jobs.tables import delta_version

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register_tables(spark: SparkSession, home: WeirHome) -> list[str]:
    """Register every Delta table under `WEIR_HOME/tables/<layer>/<table>`; returns their names."""
    names = []
    if not home.tables.is_dir():
        return names
    for layer_dir in sorted(p for p in home.tables.iterdir() if p.is_dir()):
        tables = sorted(p for p in layer_dir.iterdir() if delta_version(p) is not None)
        if not tables:
            continue
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{layer_dir.name}`")
        for table in tables:
            name = f"`{layer_dir.name}`.`{table.name}`"
            spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{table.as_posix()}'")
            names.append(f"{layer_dir.name}.{table.name}")
    return names


def split_statements(text: str) -> list[str]:
    """Split on `;` outside quotes."""
    out, current, quote = [], [], ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == ";":
            out.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    out.append("".join(current).strip())
    return [s for s in out if s]
