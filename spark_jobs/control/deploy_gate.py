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
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_jobs import topology
from spark_jobs.catalog import catalog_dir
from spark_jobs.control import eventlog
from spark_jobs.control.store import ADMITTED_CODE, control_store
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


def admitted(home: WeirHome, pipeline: str) -> dict[str, Any] | None:
    """The code last admitted for a start of `pipeline` (its fingerprint and the verdict)."""
    return control_store(home).get(pipeline, ADMITTED_CODE)


def forget_admission(home: WeirHome, pipeline: str) -> None:
    """After the checkpoint was replaced: the next start is checked again."""
    control_store(home).delete(pipeline, ADMITTED_CODE)


def admit(home: WeirHome, pipeline: Pipeline, *, actor: str, fingerprint: str | None = None,
          spark: SparkSession | None = None, check: CompatCheck | None = None) -> dict[str, Any]:
    """Admit the current code for a start of `pipeline`, or raise `IncompatibleCodeError`. The
    check runs through `check` when given, else in this process on `spark` (or a new session)."""

    fingerprint = fingerprint or code_fingerprint()
    if (admitted(home, pipeline.name) or {}).get("fingerprint") == fingerprint:
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
    control_store(home).put(pipeline.name, ADMITTED_CODE,
                            {"fingerprint": fingerprint, "verdict": result["verdict"]})
    log.info("%s: code admitted (%s)", pipeline.name, result["verdict"])
    return result


def _in_process(home: WeirHome, spark: SparkSession | None) -> CompatCheck:
    """The check on `spark`, or on a session of this process (the CLI and the drivers)."""
    def check(pipeline: Pipeline) -> dict[str, Any]:
        from spark_jobs.checkpoints.compat import compat

        return compat(spark or build_session(f"weir-compat-{pipeline.name}"), home, pipeline)

    return check
