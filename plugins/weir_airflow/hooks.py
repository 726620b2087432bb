"""`WeirSparkSubmitHook`: the apache-spark provider's `SparkSubmitHook`, launching detached.

The provider's hook resolves the master from the `spark_default` connection and builds the
spark-submit command; its `submit()` then blocks until the application ends, which would hold a
worker slot for a stream's lifetime. This hook builds the very same command and starts it
detached instead, through the driver backend of the master (see `spark_jobs.control.driver.spawn`
and `spark_jobs.control.backends`). On YARN (a connection with host `yarn`, and `deploy-mode`
`cluster` in its extra) the driver runs in the cluster: the hook adds Weir's YARN settings
(`spark_jobs.session.yarn_conf`), `local:` jars, and the driver's environment as the application
master's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.common.compat.sdk import AirflowException

from spark_jobs.control.backends import backend_for
from spark_jobs.control.driver import VENV_PYTHON, LaunchRecord, cluster_driver_env, driver_environment, spawn
from spark_jobs.home import WeirHome
from spark_jobs.jars import resolved_jars
from spark_jobs.session import jvm_conf, yarn_conf

DEFAULT_MASTER = "local[*]"


@dataclass(frozen=True)
class Submitted:
    """A blocking spark-submit that ended: its exit code and the last lines of its output."""

    returncode: int
    output: list[str]


class WeirSparkSubmitHook(SparkSubmitHook):
    """spark-submit with the venv's Spark, the cached jars, and a `local[*]` fallback master."""

    def __init__(self, *, conn_id: str = "spark_default", **kwargs: Any) -> None:
        kwargs.setdefault("spark_binary", str(VENV_PYTHON.parent / "spark-submit"))
        kwargs.setdefault("jars", ",".join(resolved_jars()))
        super().__init__(conn_id=conn_id, **kwargs)
        self._conf = {**jvm_conf(), **self._conf}    # the caller's settings win
        if self._is_yarn:
            self._for_yarn()

    def _for_yarn(self) -> None:
        """Weir's YARN settings under the caller's; the jars as `local:` (on every node, not
        uploaded); the driver's environment (venv Python, WEIR_*) as the application master's."""
        self._conf = {**yarn_conf(str(VENV_PYTHON)), **self._conf}
        self._jars = ",".join(jar if ":" in jar.split("/", 1)[0] else f"local:{jar}"
                              for jar in (self._jars or "").split(",") if jar)
        self._env_vars = {**cluster_driver_env(), **(self._env_vars or {})}
        # Executors run Weir's Python too (its data source, UDFs): the same environment.
        self._conf.update({f"spark.executorEnv.{k}": str(v) for k, v in self._env_vars.items()
                           if k not in self._conf and k != "PATH"})

    def _resolve_connection(self) -> dict[str, Any]:
        resolved = super()._resolve_connection()
        try:
            self.get_connection(self._conn_id)
        except Exception:  # no connection: the embedded default, not the provider's yarn
            resolved["master"] = DEFAULT_MASTER
        return resolved

    @property
    def master(self) -> str:
        return str(self._connection["master"])

    def command(self, application: str) -> list[str]:
        return self._build_spark_submit_command(application)

    def launch_detached(self, home: WeirHome, pipeline: str, application: str) -> LaunchRecord:
        """Start `application` detached (own process group, log under WEIR_HOME/logs)."""
        command = self.command(application)
        return spawn(home, pipeline, command, env=driver_environment(
            {k: str(v) for k, v in (self._env_vars or {}).items()}), backend=backend_for(self.master))

    def run(self, application: str) -> Submitted:
        """Submit `application` and wait, like `submit`, but hand back a non-zero exit instead of
        raising: the caller tells a verdict (an application's exit 1 with a result) from an error."""
        try:
            self.submit(application)
        except AirflowException:
            process = self._submit_sp
            if process is None or not process.returncode:
                raise           # failed before the application ran, or a cluster-side failure
        process = self._submit_sp
        return Submitted(process.returncode if process is not None else 0,
                         list(self._last_submit_log_lines))
