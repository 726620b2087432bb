"""The one judgement of whether a pipeline's lease holder still counts as its driver.

Every caller — lease take-over, the supervisor's health verdict, `weir status`, the DQ freshness
check, the checkpoint tools — asks `judge`. A holder is `gone` when this host can prove its
process ended (pid and kernel start time); `expired` when its own lease renewal is older than the
TTL, whatever `/proc` says (paused, hung, on another host, no `/proc`): its lease may be taken
over and its writes are fenced (`lease.Lease.check`); `live` otherwise.
"""

from __future__ import annotations

from enum import StrEnum

from spark_jobs.settings import settings

# A holder stops trusting its own lease before a taker may take it: the gap covers the time from
# a fence check to the commit it guards and clock differences between hosts.
HOLDER_SHARE_OF_TTL = 0.8


def lease_ttl_s() -> float:
    """The lease TTL: `WEIR_LEASE_TTL_S` (tests shorten it), else 30 s. Every driver and
    supervisor of a deployment must agree on it."""
    return settings().lease_ttl_s


class Liveness(StrEnum):
    LIVE = "live"
    EXPIRED = "expired"
    GONE = "gone"

    @property
    def takeable(self) -> bool:
        return self is not Liveness.LIVE


def judge(process_alive: bool | None, renewal_age_s: float, ttl_s: float) -> Liveness:
    """`process_alive`: True/False when the holder runs on this host, None when unknown (another
    host); `renewal_age_s`: seconds since the holder last renewed its lease."""
    if process_alive is False:
        return Liveness.GONE
    if renewal_age_s > ttl_s:
        return Liveness.EXPIRED
    return Liveness.LIVE


def holder_may_commit(renewal_age_s: float, ttl_s: float) -> bool:
    """Whether the holder itself may still write: its renewal is well within the TTL."""
    return renewal_age_s <= ttl_s * HOLDER_SHARE_OF_TTL
