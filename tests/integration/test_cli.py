"""The `weir` command line: help, one-line errors with a non-zero exit, and the analysts' SQL
door with time travel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from spark_jobs import stream, topology
from spark_jobs.generator import generate
from spark_jobs.layers import PipelineTables
from tests.integration.pipelines import playback


def weir(*args: str, home=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if home is not None:
        env["WEIR_HOME"] = str(home.root)
    return subprocess.run([sys.executable, "-m", "spark_jobs.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_command_has_help():
    top = weir("--help")
    assert top.returncode == 0 and "run" in top.stdout and "backfill" in top.stdout
    for command in ("run", "backfill", "sql", "generate"):
        assert weir(command, "--help").returncode == 0


@pytest.mark.parametrize("args", [
    ("run", "nosuchpipeline"),
    ("backfill", "playback", "--from", "2026-11-20", "--to", "2026-11-19"),
    ("backfill", "playback", "--from", "yesterday", "--to", "2026-11-19"),
    ("backfill", "playback"),
])
def test_wrong_arguments_get_a_one_line_reason_and_a_non_zero_exit(args, home):
    result = weir(*args, home=home)
    assert result.returncode != 0
    message = [line for line in result.stderr.splitlines() if line.strip()]
    assert message and "Traceback" not in result.stderr
    assert len([m for m in message if "error" in m or args[0] in m]) >= 1


@pytest.mark.slow
def test_a_shell_without_the_venv_runs_a_pipeline(home):
    """`weir` as a new user starts it: the venv's script from a shell whose PATH has no venv and no
    PYSPARK_PYTHON. Any Python worker it starts must still be the venv's Python (with the venv's
    packages, which a system `python3` need not have)."""
    generate(home.landing("playback"), files=1, sessions_per_file=2, seed=53)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.update(WEIR_HOME=str(home.root), PATH="/usr/bin:/bin")
    result = subprocess.run([str(Path(sys.executable).parent / "weir"), "run", "playback", "--once"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    commits = topology.checkpoint_location(home, playback(), "sessions") / "commits"
    assert [p for p in commits.iterdir() if p.name.isdigit()], "the sessions query committed nothing"


@pytest.mark.slow
def test_sql_reaches_every_table_by_name_with_time_travel(spark, home):
    generate(home.landing("playback"), files=2, sessions_per_file=3, seed=51)
    stream.run(playback(files_per_trigger=1), once=True, home=home, spark=spark)
    # the first silver version with rows (before it: the table's creation and the driver's
    # empty commits, its lease claim and the rebuild's)
    silver = DeltaTable.forPath(spark, str(PipelineTables.of(home, playback()).silver))
    first_batch = min(h["version"] for h in silver.history().collect()
                      if any(int((h["operationMetrics"] or {}).get(m, "0")) > 0
                             for m in ("numOutputRows", "numTargetRowsInserted")))
    result = weir("sql", "--json", "-e",
                  f"SELECT count(*) AS n FROM silver.playback_events VERSION AS OF {first_batch}; "
                  "SELECT count(*) AS n FROM silver.playback_events; "
                  "SELECT count(*) AS n FROM gold.playback_qoe_1m WHERE events < 1", home=home)
    assert result.returncode == 0, result.stderr
    first, latest, empty_windows = (json.loads(line)["n"] for line in result.stdout.splitlines())
    assert 0 < first < latest
    assert empty_windows == 0
    bad = weir("sql", "-e", "SELECT * FROM silver.no_such_table", home=home)
    assert bad.returncode == 2 and "no_such_table" in bad.stderr and "Traceback" not in bad.stderr
