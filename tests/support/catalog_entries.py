"""Catalog entries for tests: a real entry of `conf/pipelines` with some fields replaced, written
into a WEIR_CONF folder, so a driver subprocess (or `catalog.load`) loads it like any entry."""

from __future__ import annotations

from pathlib import Path

from spark_jobs.home import REPO_ROOT

__all__ = ["derived_entry"]


def derived_entry(folder: Path, entry: str, *, base: str = "playback", **fields: str) -> Path:
    """Write the entry `entry` into the WEIR_CONF folder `folder`: the real entry `base` named
    `entry`, with each of `fields` replaced by its value, given as Python source (`FileSource`,
    `KafkaSource` and `RowRule` are in scope). Returns `folder`; point WEIR_CONF at it."""
    pipelines = folder / "pipelines"
    pipelines.mkdir(parents=True, exist_ok=True)
    real = REPO_ROOT / "conf" / "pipelines" / f"{base}.py"
    what = ", ".join(fields) or "nothing"
    replaced = "".join(f",\n    {field}={value}" for field, value in {"name": repr(entry), **fields}.items())
    (pipelines / f"{entry}.py").write_text(f'''"""Test entry {entry}: {base} with {what} replaced."""
import dataclasses
import importlib.util

from spark_jobs.catalog import FileSource, KafkaSource, RowRule

_spec = importlib.util.spec_from_file_location("weir_real_{base}", {str(real)!r})
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
PIPELINE = dataclasses.replace(_real.PIPELINE{replaced})
''')
    return folder
