"""The playback gold table's schema as Arrow, for tests that write gold with delta-rs (no Spark)."""

from __future__ import annotations

import pyarrow as pa

GOLD_SCHEMA = pa.schema([
    ("window_start", pa.timestamp("us", tz="UTC")), ("window_end", pa.timestamp("us", tz="UTC")),
    ("content_id", pa.string()), ("cdn", pa.string()), ("events", pa.int64()), ("plays", pa.int64()),
    ("errors", pa.int64()), ("rebuffer_ms", pa.int64()), ("avg_bitrate_kbps", pa.float64()),
    ("sessions", pa.int64()), ("event_date", pa.date32()),
])
