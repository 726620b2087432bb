"""The deploy gate: changed code is started only if it fits the checkpoint; unchanged code is
restarted without a check; a refusal is written to the event log."""

from __future__ import annotations

import dataclasses

import pytest

from spark_jobs import stream
from spark_jobs.control import eventlog
from spark_jobs.control.deploy_gate import IncompatibleCodeError, admit, admitted, code_fingerprint
from spark_jobs.generator import generate
from tests.integration.pipelines import playback


def test_changed_code_must_fit_the_checkpoint(spark, home):
    pipeline = playback(files_per_trigger=2)
    first = admit(home, pipeline, actor="test", spark=spark)
    assert first["verdict"] == "compatible (no checkpoint)" and admitted(home, "playback") is not None

    generate(home.landing("playback"), files=2, sessions_per_file=4, seed=61)
    stream.run(pipeline, once=True, home=home, spark=spark)
    assert admit(home, pipeline, actor="test", spark=spark)["checked"] is False, \
        "unchanged code restarts without a check"
    assert admit(home, pipeline, actor="test", fingerprint="edited", spark=spark)["verdict"] == "compatible"

    regrouped = dataclasses.replace(pipeline, aggregation=dataclasses.replace(
        pipeline.aggregation, group_by=(*pipeline.aggregation.group_by, "country")))
    with pytest.raises(IncompatibleCodeError, match="needs full refresh"):
        admit(home, regrouped, actor="on-call", fingerprint="regrouped", spark=spark)
    refused = [e for e in eventlog.read(home, "playback") if e["outcome"] == "refused"]
    assert [(e["action"], e["actor"]) for e in refused] == [("deploy", "on-call")]
    assert len(code_fingerprint()) == 64
