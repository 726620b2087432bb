"""The deploy gate: before the control plane starts a driver, the code it starts must fit the
pipeline's checkpoint (stateful operators, keys, shuffle partitions, sources, output schemas).

Checking needs a Spark session, so it runs only when the code changed since it was last admitted
(a fingerprint of the package and the catalog); a restart of the same code costs nothing. An
incompatible start is refused with the verdict and its reasons, and written to the event log.
Where no JVM may start (Airflow), the caller passes a `CompatCheck` that submits the check as a
Spark job (`weir checkpoint compat`) instead of building a session in its own process.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs import topology
from spark_jobs.catalog import catalog_dir
from spark_jobs.control import eventlog
from spark_jobs.home import REPO_ROOT, WeirHome
from spark_jobs.session import build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.catalog import Pipeline

log = logging.getLogger(__name__)
# The compatibility verdict of the current code on a pipeline's checkpoint, as `compat` returns it.
CompatCheck = Callable[["Pipeline"], dict[str, Any]]


class IncompatibleCodeError(RuntimeError):
    """The code to deploy does not fit the checkpoint; the message says what to do."""


def code_fingerprint() -> str:
    """A digest of what decides the query plans: the package's code and the catalog."""
    digest = hashlib.sha256()
    roots = (REPO_ROOT / "spark_jobs", catalog_dir())
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file()):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def admitted_path(home: WeirHome, pipeline: str) -> Path:
    return home.control(pipeline) / "admitted_code.json"


def admit(home: WeirHome, pipeline: Pipeline, *, actor: str, fingerprint: str | None = None,
          spark: SparkSession | None = None, check: CompatCheck | None = None) -> dict[str, Any]:
    """Admit the current code for a start of `pipeline`, or raise `IncompatibleCodeError`. The
    check runs through `check` when given, else in this process on `spark` (or a new session)."""

    fingerprint = fingerprint or code_fingerprint()
    path = admitted_path(home, pipeline.name)
    admitted = json.loads(path.read_text()) if path.is_file() else {}
    if admitted.get("fingerprint") == fingerprint:
        return {"checked": False, "compatible": True, "verdict": "compatible (code unchanged)"}
    result: dict[str, Any] = {"checked": False, "compatible": True, "verdict": "compatible (no checkpoint)"}
    if topology.has_checkpoint(home, pipeline):
        result = {"checked": True, **(check or _in_process(home, spark))(pipeline)}
    if not result["compatible"]:
        reasons = "; ".join(f"{r['query']}: {r['reason']}" for r in result.get("reasons", []))
        eventlog.record(pipeline.name, "deploy", "refused", actor=actor,
                        reason=f"code does not fit the checkpoint: {result['verdict']}",
                        details=result, home=home)
        raise IncompatibleCodeError(
            f"refusing to start changed code of {pipeline.name}: {result['verdict']} ({reasons}). "
            "See docs/runbooks/full-refresh.md, or `weir checkpoint reset` for a state reset.")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint, "verdict": result["verdict"]}))
    tmp.replace(path)
    log.info("%s: code admitted (%s)", pipeline.name, result["verdict"])
    return result


def _in_process(home: WeirHome, spark: SparkSession | None) -> CompatCheck:
    """The check on `spark`, or on a session of this process (the CLI and the drivers)."""
    def check(pipeline: Pipeline) -> dict[str, Any]:
        from spark_jobs.checkpoints.compat import compat

        return compat(spark or build_session(f"weir-compat-{pipeline.name}"), home, pipeline)

    return check
