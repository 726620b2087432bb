"""`timing.StepTimes`: steps run side by side are listed in the order given, not as they end."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from spark_jobs.timing import StepTimes


def test_steps_timed_side_by_side_keep_the_order_given() -> None:
    steps = StepTimes()
    actions = steps.timed({"silver": lambda: time.sleep(0.2), "quarantine": lambda: None})
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(a) for a in actions.values()]:
            future.result()
    assert list(steps.seconds) == ["silver", "quarantine"]
    assert steps.seconds["silver"] >= 0.2 > steps.seconds["quarantine"]
