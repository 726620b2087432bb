"""Checkpoint generations: replacing a pipeline's live checkpoint as a whole.

The live checkpoint stays where the stream looks for it (`topology.checkpoint_location`); a
restore or a reset builds the next generation in a hidden staging folder beside it, then swaps
each query folder in by rename, and bumps `checkpoints/<P>/generation.json`. The generation it
replaces is kept as a backup (taken by the caller before the swap), so `prune` is the retention of
old generations too.

A reset starts the ingest query from a source position:
- files: `earliest` = every landing file; `latest` = only files arriving from now on;
  a TIMESTAMP = files modified after it (the one place a modification time decides, because
  on-call asks for it). The new checkpoint's landing manifest is seeded with the files to skip;
- Kafka: an empty checkpoint plus the starting point recorded by `kafka.record_reset`
  (startingOffsets / startingTimestamp), which the source applies to a fresh checkpoint.
Downstream queries (gold reads silver) start fresh: they re-read their Delta source from its
current snapshot, and the upsert by window key makes gold whole again.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs import kafka, landing_manifest, topology
from spark_jobs.catalog import FileSource
from spark_jobs.checkpoints.backups import Manifest, Progress, copy_files, take_backup

if TYPE_CHECKING:
    from spark_jobs.catalog import Pipeline
    from spark_jobs.home import WeirHome

log = logging.getLogger(__name__)
GENERATION_FILE = "generation.json"
class ResetFromError(ValueError):
    """`--from` is not earliest, latest or a time."""


def current_generation(home: WeirHome, pipeline: str) -> dict[str, Any]:
    path = home.checkpoints(pipeline) / GENERATION_FILE
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError):
        return {"generation": 0, "origin": "first start"}


def safety_backup(home: WeirHome, p: Pipeline, action: str, actor: str, reason: str | None,
                   progress: Progress | None) -> Manifest | None:
    """The automatic backup of the live checkpoint before a destructive action replaces or removes
    any of it (whole copy: the stream is stopped, and even a damaged checkpoint is kept as it
    was). None when there is no checkpoint yet."""
    if not topology.existing_checkpoints(home, p):
        return None
    generation = int(current_generation(home, p.name).get("generation", 0))
    return take_backup(home, p, kind=f"before {action}", whole=True, actor=actor,
                       reason=reason, generation=generation, progress=progress)


def _write_generation(home: WeirHome, pipeline: str, origin: str) -> int:
    folder = home.checkpoints(pipeline)
    number = int(current_generation(home, pipeline).get("generation", 0)) + 1
    payload = {"generation": number, "origin": origin,
               "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    tmp = folder / f".{GENERATION_FILE}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(json.dumps(payload, sort_keys=True))
    os.replace(tmp, folder / GENERATION_FILE)
    return number


def staging_folder(home: WeirHome, pipeline: str) -> Path:
    folder = home.confine(home.checkpoints(pipeline) / f".staging-{uuid.uuid4().hex[:8]}")
    folder.mkdir(parents=True)
    return folder


def install(home: WeirHome, pipeline: Pipeline, staged: Path, origin: str) -> int:
    """Make the query folders in `staged` the live checkpoint (queries absent from `staged` start
    empty), discard the replaced folders (the caller backed them up) and bump the generation."""
    replaced = home.confine(home.checkpoints(pipeline.name) / f".replaced-{uuid.uuid4().hex[:8]}")
    replaced.mkdir(parents=True)
    try:
        for query in topology.QUERIES:
            live = home.confine(topology.checkpoint_location(home, pipeline, query))
            if live.exists():
                os.replace(live, replaced / query)
            if (staged / query).exists():
                live.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged / query, live)
        number = _write_generation(home, pipeline.name, origin)
    finally:
        shutil.rmtree(replaced, ignore_errors=True)
        shutil.rmtree(staged, ignore_errors=True)
    log.info("%s checkpoint generation %d installed (%s)", pipeline.name, number, origin)
    return number


def parse_reset_from(text: str) -> str | int:
    """`earliest`, `latest`, or a time as epoch milliseconds (ISO-8601, naive = UTC, or ms)."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ResetFromError(
            f"--from must be earliest, latest or a time (ISO-8601 or epoch ms), not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class ResetPlan:
    """What a reset starts from: for files, the landing files it marks as already seen."""

    reset_from: str
    source: str
    skipped_files: tuple[str, ...] = ()
    pending_files: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"reset_from": self.reset_from, "source": self.source,
                "skipped_files": len(self.skipped_files), "files_to_process": len(self.pending_files)}


def landing_files(home: WeirHome, pipeline: Pipeline) -> list[Path]:
    """Files the file source would list: the landing folder's visible files (writers use hidden
    names until a file is complete)."""
    folder = home.landing(pipeline.name)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith((".", "_")))


def plan_reset(home: WeirHome, pipeline: Pipeline, reset_from: str) -> ResetPlan:
    position = parse_reset_from(reset_from)
    if not isinstance(pipeline.source, FileSource):
        return ResetPlan(reset_from, pipeline.source.kind)
    files = landing_files(home, pipeline)
    if position == "earliest":
        skipped: list[Path] = []
    elif position == "latest":
        skipped = files
    else:
        skipped = [f for f in files if f.stat().st_mtime * 1000 <= int(position)]
    pending = [f for f in files if f not in skipped]
    return ResetPlan(reset_from, "files", tuple(str(f) for f in skipped), tuple(str(f) for f in pending))


def stage_reset(home: WeirHome, pipeline: Pipeline, plan: ResetPlan, staged: Path) -> None:
    """Build the reset generation in `staged`: the ingest query's landing manifest seeded at the
    plan's position (the skipped files behind its start), every other query absent (it starts
    fresh). An empty checkpoint reads files from the start, and Kafka from its recorded marker."""
    if plan.source != "files" or not plan.skipped_files:
        return
    landing_manifest.seed(landing_manifest.manifest_dir(staged / "ingest"), home.landing(pipeline.name),
                 [Path(f) for f in plan.skipped_files])
    log.info("%s reset from %s: %d landing file(s) marked as read", pipeline.name, plan.reset_from,
             len(plan.skipped_files))


def after_install(home: WeirHome, pipeline: Pipeline, plan: ResetPlan) -> None:
    """Kafka: record where the fresh ingest checkpoint starts (the source reads it once)."""
    if plan.source == "kafka":

        kafka.record_reset(home, pipeline.name, plan.reset_from)


def stage_backup(backup: Path, staged: Path) -> None:
    """Copy a backup's query checkpoints into the staging folder."""

    source = backup / "checkpoints"
    if not source.is_dir():
        return
    for query in sorted(p.name for p in source.iterdir() if p.is_dir()):
        files = sorted(f.relative_to(source / query) for f in (source / query).rglob("*") if f.is_file())
        copy_files(source / query, staged / query, files)
