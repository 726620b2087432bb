"""Benchmark inputs: realistic playback landing files made once per run by the platform's own
generator, then hard-linked into each measurement's fresh WEIR_HOME, so every baseline reads the
very same bytes."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from spark_jobs.generator import generate

log = logging.getLogger(__name__)
# Every dataset lies inside one UTC day, so the back-fill of that day re-derives all of it.
DAY = dt.date(2026, 11, 18)
START = dt.datetime(DAY.year, DAY.month, DAY.day, 0, 5, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Dataset:
    """A folder of landing files and what is in it."""

    name: str
    path: str
    files: int
    lines: int
    valid_events: int
    bytes: int
    day: str = DAY.isoformat()
    days: int = 1               # the days its events span, `day` the middle one

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Dataset:
        return cls(**data)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Size:
    """How a dataset is generated: `files` landing files of `sessions_per_file` sessions each."""

    files: int
    sessions_per_file: int


def make(root: Path, name: str, size: Size, *, seed: int, one_file: bool = False,
         line_bytes: int = 0, days: int = 1) -> Dataset:
    """Generate dataset `name` under `root` (replacing an old one of that name). With `one_file`,
    the generated files are joined, in order, into a single landing file (the same lines, re-sent
    duplicates included): what a day's export dropped as one file looks like. With `line_bytes`,
    a further file holds one line of that many bytes and no line break (`one_line`). With `days`,
    the files are spread evenly over that many days, `DAY` the middle one: the backlog an outage
    of days leaves."""
    path = (root / name).absolute()
    shutil.rmtree(path, ignore_errors=True)
    first = START - dt.timedelta(days=days // 2)
    parts = [generate(path, files=size.files // days, sessions_per_file=size.sessions_per_file,
                      seed=seed + d, start=first + dt.timedelta(days=d),
                      prefix=f"b{name}" if days == 1 else f"b{name}{d}-")
             for d in range(days)]
    generated = [f for written in parts for f in written.files]
    files = [join(generated, path / f"b{name}.jsonl")] if one_file else generated
    lines = sum(written.lines for written in parts)
    if line_bytes:
        files = [*files, one_line(path / f"b{name}-line.jsonl", line_bytes)]
        lines += 1
    events = set().union(*(written.event_ids for written in parts))
    dataset = Dataset(name=name, path=str(path), files=len(files), lines=lines, valid_events=len(events),
                      bytes=sum(f.stat().st_size for f in files), days=days)
    (root / f"{name}.json").write_text(json.dumps(asdict(dataset)))
    log.info("dataset %s: %d files, %d lines, %.1f MB", name, dataset.files, dataset.lines,
             dataset.bytes / 1e6)
    return dataset


def one_line(target: Path, size: int) -> Path:
    """A landing file of one line of `size` bytes without a line break, the start of a JSON
    object whose string never ends: what a binary, or a JSON array dumped on one line, is to a
    line reader. Written under a hidden name, then renamed into view."""
    hidden = target.with_name(f".{target.name}.tmp")
    head = b'{"event_id":"one-line","junk":"'
    block = b"a" * (16 << 20)
    with hidden.open("wb") as out:
        out.write(head)
        left = size - len(head)
        while left > 0:
            out.write(block[:min(left, len(block))])
            left -= len(block)
    os.replace(hidden, target)
    return target


def join(parts: list[Path], target: Path) -> Path:
    """Concatenate `parts` into `target` (written under a hidden name, then renamed into view, as
    every landing writer does) and remove them."""
    hidden = target.with_name(f".{target.name}.tmp")
    with hidden.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                shutil.copyfileobj(f, out, 16 << 20)
            part.unlink()
    os.replace(hidden, target)
    return target


def link_into(dataset: Dataset, landing: Path) -> None:
    """Put the dataset's files into a landing folder (hard links: no copy, same bytes)."""
    landing.mkdir(parents=True, exist_ok=True)
    for source in sorted(Path(dataset.path).iterdir()):
        target = landing / source.name
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
