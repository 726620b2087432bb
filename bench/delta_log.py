"""What a Delta table's transaction log says about its commits, read as plain JSON (no JVM): when
each version became visible, and which data files and how many rows it added. The harness uses it
for throughput over time (rows per commit) and for latency (which commit made a row visible)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote


@dataclass(frozen=True)
class Commit:
    version: int
    visible_at: float                      # mtime of the log entry: when readers could see it
    operation: str
    rows_added: int
    files_added: tuple[str, ...] = field(default=())   # paths within the table


def commits(table: Path) -> list[Commit]:
    """Every commit of the table at `table`, in version order."""
    out = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        rows, files, operation = 0, [], ""
        for line in entry.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                files.append(unquote(add["path"]))
                stats = json.loads(add.get("stats") or "{}")
                rows += int(stats.get("numRecords", 0))
            elif "commitInfo" in action:
                operation = str(action["commitInfo"].get("operation", ""))
        out.append(Commit(int(entry.stem), entry.stat().st_mtime, operation, rows, tuple(files)))
    return out


def first_visible(table: Path, column: str) -> dict[object, float]:
    """Each value of `column` → when the first commit that added a row holding it became visible
    (each added file read, that column only)."""
    import pyarrow.parquet as pq

    seen: dict[object, float] = {}
    for commit in commits(table):
        for path in commit.files_added:
            for value in pq.read_table(table / path, columns=[column]).column(column).to_pylist():
                seen.setdefault(value, commit.visible_at)
    return seen
