"""`session.session_conf`: the settings a back-fill, a refresh and a driver set on a session."""

from __future__ import annotations

import pytest

from spark_jobs.session import session_conf

CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def test_settings_set_for_a_block_are_the_sessions_own_again_after_it(spark):
    """A back-fill, a refresh and a driver set their settings on a session passed in (tests,
    benchmarks, a notebook) and give it back as it was, even when the block fails."""
    unset = "spark.weir.test.unset"
    before = spark.conf.get(CACHE_COMPRESSED)
    flipped = "false" if before == "true" else "true"
    with pytest.raises(RuntimeError), session_conf(spark, {CACHE_COMPRESSED: flipped, unset: "x"}):
        assert (spark.conf.get(CACHE_COMPRESSED), spark.conf.get(unset)) == (flipped, "x")
        raise RuntimeError("the block failed")
    assert (spark.conf.get(CACHE_COMPRESSED), spark.conf.get(unset, None)) == (before, None)
