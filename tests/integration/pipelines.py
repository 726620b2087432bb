"""Test variants of catalog pipelines, in-process (a Pipeline object) and for subprocess drivers
(a WEIR_CONF catalog folder whose entry derives from the real one)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from spark_jobs import catalog
from spark_jobs.catalog import FileSource, Pipeline, derived_entry


def playback(files_per_trigger: int | None = 1, trigger: str = "1 second",
             max_bytes_per_trigger: int = 64 << 20) -> Pipeline:
    """The catalog's playback entry in small batches, every query on the test's `trigger`."""
    return dataclasses.replace(catalog.load("playback"), trigger_interval=trigger,
                               derived_trigger_interval=None, shuffle_partitions=2,
                               source=FileSource(max_files_per_trigger=files_per_trigger,
                                                 max_bytes_per_trigger=max_bytes_per_trigger))


def write_catalog(folder: Path, files_per_trigger: int | None = 1, trigger: str = "1 second",
                  max_bytes_per_trigger: int = 64 << 20, **fields: float | str) -> Path:
    """A catalog folder with `playback` in small batches, every query on `trigger` (and any other
    `fields` of the entry replaced); point WEIR_CONF at the returned path."""
    return derived_entry(folder, "playback", trigger_interval=repr(trigger),
                         derived_trigger_interval="None", shuffle_partitions="2",
                         source=f"FileSource(max_files_per_trigger={files_per_trigger!r}, "
                                f"max_bytes_per_trigger={max_bytes_per_trigger!r})",
                         **{name: repr(value) for name, value in fields.items()})
