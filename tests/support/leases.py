"""Put a lease into the control store as a scenario needs it (a holder on another host, a renewal
long ago, a lease given back), through the store's own compare-and-swap."""

from __future__ import annotations

import dataclasses

from spark_jobs.control import lease as leases
from spark_jobs.control.store import control_store
from spark_jobs.home import WeirHome


def plant_lease(home: WeirHome, record: leases.LeaseRecord | None) -> None:
    """Make `record` the pipeline's lease (None: give it back), whatever holds it now."""
    pipeline = record.pipeline if record is not None else "playback"
    store = control_store(home)
    slot = store.lease_slot(pipeline)
    if record is None:
        slot.clear()
    else:
        slot.put(dataclasses.asdict(record))
    assert store.swap_lease(pipeline, slot), "the lease changed while it was planted"
