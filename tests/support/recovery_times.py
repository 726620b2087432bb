"""The recovery times #15 compares across profiles, measured the same way in each end-to-end
test: deploy → first committed batch, kill → detection, kill → the successor's first committed
batch. A batch counts as committed when the ingest query's checkpoint holds its commit file."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from spark_jobs import catalog, topology
from spark_jobs.home import WeirHome


def committed_batches(home: WeirHome, pipeline: str) -> set[int]:
    folder = topology.checkpoint_location(home, catalog.load(pipeline), "ingest") / "commits"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


@dataclass
class RecoveryTimes:
    """Stopwatch of one deploy and one kill of `pipeline`'s driver."""

    profile: str
    home: WeirHome
    pipeline: str
    marks: dict[str, float] = field(default_factory=dict)
    before_kill: set[int] = field(default_factory=set)

    def deployed(self) -> None:
        self.marks["deploy"] = time.monotonic()

    def first_batch(self) -> bool:
        """Poll: whether a first batch has committed (marks it once)."""
        if "first_batch" not in self.marks and committed_batches(self.home, self.pipeline):
            self.marks["first_batch"] = time.monotonic()
        return "first_batch" in self.marks

    def killed(self) -> None:
        self.before_kill = committed_batches(self.home, self.pipeline)
        self.marks["kill"] = time.monotonic()

    def detected(self) -> None:
        self.marks["detected"] = time.monotonic()

    def successor_batch(self) -> bool:
        """Poll: whether a batch the killed driver had not committed has committed since."""
        new = committed_batches(self.home, self.pipeline) - self.before_kill
        if "successor_batch" not in self.marks and new:
            self.marks["successor_batch"] = time.monotonic()
        return "successor_batch" in self.marks

    def report(self) -> str:
        m = self.marks
        return (f"{self.profile}: deploy → first committed batch {m['first_batch'] - m['deploy']:.1f}s, "
                f"kill → detection {m['detected'] - m['kill']:.1f}s, kill → successor's first "
                f"committed batch {m['successor_batch'] - m['kill']:.1f}s")
