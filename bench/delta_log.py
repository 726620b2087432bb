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
    files_added: tuple[str, ...] = field(default=())


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
                files.append(Path(unquote(add["path"])).name)
                stats = json.loads(add.get("stats") or "{}")
                rows += int(stats.get("numRecords", 0))
            elif "commitInfo" in action:
                operation = str(action["commitInfo"].get("operation", ""))
        out.append(Commit(int(entry.stem), entry.stat().st_mtime, operation, rows, tuple(files)))
    return out


def visible_at_by_file(table: Path) -> dict[str, float]:
    """Data file name → when the commit that added it became visible."""
    return {name: c.visible_at for c in commits(table) for name in c.files_added}
