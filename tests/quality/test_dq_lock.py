"""DQ runs take turns: two at once (the runs of one Airflow back-fill end together, or `weir dq`
beside `P_dq`) replaced each other's Great Expectations suites in `WEIR_HOME/dq`, and one failed
with "ExpectationSuite ... not found". Here two real processes contend for the lock `run_dq`
holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOLD = r"""
import json, sys, time
from pathlib import Path
from spark_jobs.home import WeirHome
from spark_jobs.quality.gx_context import exclusive
with exclusive(WeirHome(Path(sys.argv[1]))):
    began = time.time()
    time.sleep(1.0)
    ended = time.time()
print(json.dumps([began, ended]))
"""


def test_two_dq_runs_take_turns(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    spans = []
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err[-2000:]
        spans.append(json.loads(out.strip().splitlines()[-1]))
    first, second = sorted(spans)
    assert second[0] >= first[1], f"the two runs overlapped: {spans}"
