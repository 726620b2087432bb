"""The one place that knows the layout under WEIR_HOME, and confines destructive paths to it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.errors import UserError
from spark_jobs.settings import REPO_ROOT as REPO_ROOT  # re-exported: the checkout's root
from spark_jobs.settings import settings

LAYERS = ("bronze", "silver", "quarantine", "gold", "dim", "platform")


class PathEscapeError(UserError, ValueError):
    """A path that would leave WEIR_HOME (through `..` or a symbolic link)."""


@dataclass(frozen=True)
class WeirHome:
    """Paths under the platform root: landing, tables, checkpoints, backups, dq, airflow, logs."""

    root: Path

    @classmethod
    def from_env(cls) -> WeirHome:
        """The home of this process's settings (`WEIR_HOME`), made absolute against the current
        folder each time, as a relative `WEIR_HOME` always was."""
        return cls(settings().home.absolute())

    def landing(self, pipeline: str) -> Path:
        return self.root / "landing" / pipeline

    def table(self, layer: str, name: str) -> Path:
        if layer not in LAYERS:
            raise ValueError(f"unknown table layer {layer!r}; expected one of {', '.join(LAYERS)}")
        return self.root / "tables" / layer / name

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    def checkpoints(self, pipeline: str) -> Path:
        return self.root / "checkpoints" / pipeline

    def backups(self, pipeline: str) -> Path:
        return self.root / "backups" / pipeline

    def control(self, pipeline: str) -> Path:
        """Lease, heartbeat and stop-request files of a pipeline's driver."""
        return self.root / "control" / pipeline

    def results(self, pipeline: str) -> Path:
        """JSON results of the `weir` jobs Airflow submits, kept until the task has read them."""
        return self.control(pipeline) / "results"

    @property
    def dq(self) -> Path:
        return self.root / "dq"

    @property
    def airflow(self) -> Path:
        return self.root / "airflow"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kafka(self) -> Path:
        """Data, configuration and state of the local development Kafka broker."""
        return self.root / "kafka"

    def confine(self, path: str | os.PathLike[str]) -> Path:
        """Resolve `path` (relative paths are taken from the root) and refuse it unless it lies
        inside WEIR_HOME once `..` and symbolic links are resolved."""
        root = self.root.resolve()
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = root / candidate
        resolved = candidate.resolve()
        if resolved != root and root not in resolved.parents:
            raise PathEscapeError(f"refusing {path}: it resolves to {resolved}, outside WEIR_HOME {root}")
        return resolved
