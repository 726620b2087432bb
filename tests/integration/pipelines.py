"""Test variants of catalog pipelines, in-process (a Pipeline object) and for subprocess drivers
(a WEIR_CONF catalog folder whose entry derives from the real one)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from spark_jobs import catalog
from spark_jobs.catalog import FileSource, Pipeline
from spark_jobs.home import REPO_ROOT


def playback(files_per_trigger: int | None = 1, trigger: str = "1 second",
             max_bytes_per_trigger: int = 64 << 20) -> Pipeline:
    return dataclasses.replace(catalog.load("playback"), trigger_interval=trigger, shuffle_partitions=2,
                               source=FileSource(max_files_per_trigger=files_per_trigger,
                                                 max_bytes_per_trigger=max_bytes_per_trigger))


def write_catalog(folder: Path, files_per_trigger: int | None = 1, trigger: str = "1 second",
                  max_bytes_per_trigger: int = 64 << 20, **fields: float | str) -> Path:
    """A catalog folder with `playback` in small batches (and any other `fields` of the entry
    replaced); point WEIR_CONF at the returned path."""
    replaced = "".join(f", {name}={value!r}" for name, value in fields.items())
    pipelines = folder / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    real = REPO_ROOT / "conf" / "pipelines" / "playback.py"
    (pipelines / "playback.py").write_text(f'''
import dataclasses, importlib.util
from spark_jobs.catalog import FileSource
_spec = importlib.util.spec_from_file_location("weir_real_playback", {str(real)!r})
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
PIPELINE = dataclasses.replace(_real.PIPELINE, trigger_interval={trigger!r}, shuffle_partitions=2,
                               source=FileSource(max_files_per_trigger={files_per_trigger},
                                                 max_bytes_per_trigger={max_bytes_per_trigger}){replaced})
''')
    return folder
