"""`validate`: is a pipeline's checkpoint something Spark can restart from, exactly once?

Each problem names its file. Errors make the checkpoint unhealthy; a warning is a state Spark
recovers from by itself (a batch planned but not committed is replayed at the next start, and
the idempotent writers make that replay a no-op), shown so on-call knows what will happen.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

from spark_jobs import topology
from spark_jobs.checkpoints import layout
from spark_jobs.checkpoints.liveness import live_leases

if TYPE_CHECKING:
    from pathlib import Path

    from spark_jobs.catalog import Pipeline
    from spark_jobs.checkpoints.backups import Manifest
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    severity: Literal["error", "warning"]
    query: str | None
    file: str
    problem: str

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


def validate_query(query_dir: Path, query: str, root: Path) -> list[Problem]:
    """Every problem of one query's checkpoint folder."""
    problems: list[Problem] = []

    def add(severity: Literal["error", "warning"], path: Path, text: str) -> None:
        problems.append(Problem(severity, query, str(path.relative_to(root)), text))

    meta = query_dir / "metadata"
    if not meta.is_file():
        add("error", meta, "missing metadata (the query id): Spark cannot recognise this checkpoint")
    else:
        try:
            if "id" not in json.loads(meta.read_text(encoding="utf-8").strip() or "{}"):
                add("error", meta, "metadata has no query id")
        except (OSError, ValueError):
            add("error", meta, "metadata is not JSON")

    for entry in sorted(query_dir.rglob("*")):
        if entry.is_file() and layout.is_temporary(entry.name):
            add("error", entry, "leftover temporary file (a write interrupted mid-way); remove it")

    readable: dict[str, list[int]] = {}
    for log_name in ("offsets", "commits"):
        folder = query_dir / log_name
        ok: list[int] = []
        for batch in layout.batch_ids(folder):
            try:
                layout.read_log_file(folder / str(batch))
                ok.append(batch)
            except layout.LogFileError as err:
                add("error", folder / str(batch), f"{log_name} file of batch {batch}: {err}")
        readable[log_name] = ok
        ids = layout.batch_ids(folder)
        missing = sorted(set(range(ids[0], ids[-1] + 1)) - set(ids)) if ids else []
        for batch in missing:
            add("error", folder / str(batch), f"{log_name} of batch {batch} missing between "
                f"{ids[0]} and {ids[-1]} (gap in the {log_name} log)")

    offsets, commits = layout.batch_ids(query_dir / "offsets"), layout.batch_ids(query_dir / "commits")
    if commits and not offsets:
        add("error", query_dir / "offsets", "commits exist but the offsets log is empty")
    for batch in sorted(set(commits) - set(offsets)):
        if offsets and batch > offsets[-1]:
            add("error", query_dir / "commits" / str(batch),
                f"batch {batch} committed but never planned (no offsets/{batch})")
    if offsets:
        last_offset = offsets[-1]
        last_commit = commits[-1] if commits else None
        if last_commit is None or last_offset - last_commit > 1:
            first_uncommitted = (last_commit + 1) if last_commit is not None else offsets[0]
            if last_commit is not None or last_offset > offsets[0]:
                add("error", query_dir / "commits" / str(first_uncommitted),
                    f"gap between offsets and commits: offsets reach batch {last_offset}, commits "
                    f"only {last_commit if last_commit is not None else 'none'}")
            else:
                add("warning", query_dir / "commits" / str(last_offset),
                    f"batch {last_offset} planned but not committed: it is replayed at the next start")
        elif last_offset - last_commit == 1:
            add("warning", query_dir / "commits" / str(last_offset),
                f"batch {last_offset} planned but not committed: it is replayed at the next start")

    committed = readable["commits"][-1] if readable["commits"] else None
    if committed is not None:
        problems += _state_problems(query_dir, query, root, committed)
    return problems


def _state_problems(query_dir: Path, query: str, root: Path, committed: int) -> list[Problem]:
    problems = []
    operators = layout.state_operators(query_dir)
    if query in topology.STATEFUL_QUERIES and not operators:
        problems.append(Problem("error", query, str((query_dir / "state").relative_to(root)),
                                f"state missing: batch {committed} is committed but there is no state"))
    for operator in operators:
        for partition in layout.state_partitions(operator):
            folder = operator / str(partition)
            if committed + 1 not in layout.state_versions(folder):
                problems.append(Problem(
                    "error", query, str(folder.relative_to(root)),
                    f"state of operator {operator.name} partition {partition} missing for committed "
                    f"batch {committed} (no version {committed + 1} file)"))
    return problems


def validate_backup(folder: Path, manifest: Manifest, root: Path) -> list[Problem]:
    """The errors of the checkpoint a backup holds (what a restore would install): each query its
    manifest lists must be there and validate."""
    problems: list[Problem] = []
    for query in sorted(manifest.queries):
        query_dir = folder / "checkpoints" / query
        if not query_dir.is_dir():
            problems.append(Problem("error", query, str(query_dir.relative_to(root)),
                                    "listed in the manifest but missing from the backup"))
            continue
        problems += [p for p in validate_query(query_dir, query, root) if p.severity == "error"]
    return problems


def validate(home: WeirHome, pipeline: Pipeline) -> dict[str, object]:
    """All problems of the pipeline's checkpoint: `{"healthy": bool, "problems": [...]}`."""
    root = home.root
    problems: list[Problem] = []
    started = []
    for query in topology.QUERIES:
        folder = topology.checkpoint_location(home, pipeline, query)
        if not folder.exists():
            continue
        started.append(query)
        problems += validate_query(folder, query, root)
    leases = live_leases(home, pipeline.name)
    if len(leases) > 1:
        for lease in leases:
            where = lease.where.removeprefix(f"{root}/")
            problems.append(Problem("error", None, where,
                                    f"more than one live lease: pid {lease.pid} on {lease.host}"))
    errors = [p for p in problems if p.severity == "error"]
    log.info("%s checkpoint: %d error(s), %d warning(s)", pipeline.name, len(errors),
             len(problems) - len(errors))
    return {"pipeline": pipeline.name, "healthy": not errors, "queries": started,
            "problems": [p.as_dict() for p in problems]}
