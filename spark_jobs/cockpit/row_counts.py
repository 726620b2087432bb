"""Row counts of a pipeline's Delta tables from their transaction logs (the per-file `numRecords`
statistics Delta writes with every file), so the cockpit never scans data to show a share."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def row_count(path: Path) -> int | None:
    """Rows in the current version of the Delta table at `path`; None when it does not exist
    or a file was written without statistics."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    counts = actions.column("num_records").to_pylist()
    return None if any(c is None for c in counts) else sum(counts)
