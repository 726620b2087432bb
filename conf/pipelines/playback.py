"""Video playback quality-of-experience events: the reference pipeline."""

from spark_jobs.catalog import (
    Aggregation,
    Dimension,
    Field,
    FileSource,
    Pipeline,
    RestartPolicy,
    RowRule,
    Sessions,
)

EVENT_TYPES = (
    "start", "heartbeat", "pause", "resume", "buffer_start", "buffer_end",
    "bitrate_change", "error", "end",
)

PIPELINE = Pipeline(
    name="playback",
    description="Player events → QoE metrics per minute, content and CDN",
    events_table="playback_events",
    key="event_id",
    event_time="event_time",
    fields=(
        Field("event_id", required=True),
        Field("session_id", required=True),
        Field("user_id", required=True),
        Field("content_id", required=True),
        Field("event_type", required=True, allowed=EVENT_TYPES),
        Field("event_time", "timestamp", required=True),
        Field("device"),
        Field("cdn"),
        Field("country"),
        Field("error_code"),
        Field("bitrate_kbps", "integer", minimum=0, maximum=100_000),
        Field("buffer_ms", "integer", minimum=0),
        Field("position_s", "number", minimum=0),
    ),
    dimension=Dimension(
        table="content_catalog", key="content_id", columns=("title", "genre"),
        seed_csv="conf/dims/content_catalog.csv",
    ),
    aggregation=Aggregation(
        table="playback_qoe_1m",
        window="1 minute",
        group_by=("content_id", "cdn"),
        measures={
            "events": "count(1)",
            "plays": "count_if(event_type = 'start')",
            "errors": "count_if(event_type = 'error')",
            "rebuffer_ms": "coalesce(sum(CASE WHEN event_type = 'buffer_end' THEN buffer_ms END), 0)",
            "avg_bitrate_kbps": "avg(bitrate_kbps)",
            "sessions": "approx_count_distinct(session_id)",
        },
        watermark="10 minutes",
    ),
    # One row per viewing session, kept current by the stream's keyed state (spark_jobs.sessions):
    # closed by its `end` event or after 30 minutes without events.
    sessions=Sessions(table="playback_sessions", key="session_id", gap="30 minutes",
                      watermark="10 minutes", carry=("user_id", "content_id")),
    source=FileSource(),
    trigger_interval="5 seconds",
    # Gold (1-minute windows) and the sessions (30-minute gaps) need no update every few seconds;
    # their micro-batches' fixed cost would otherwise share the cores with the ingest at every
    # trigger (docs/performance.md, "The deployed driver's latency").
    derived_trigger_interval="10 seconds",
    # Not in a process of their own (`derived_in_own_process`): on two cores a saturated ingest
    # leaves a niced second process no batch for minutes, and gold must stay current; a deployment
    # that puts silver's latency first turns it on (docs/performance.md, "Gold and the sessions in
    # a process of their own").
    restart_policy=RestartPolicy(initial_backoff_s=2, max_backoff_s=60, max_restarts=5, window_s=3600),
    # Applied by the stream and the back-fill to each batch: true (or null) for an acceptable row;
    # `quarantine` sends a violating row to quarantine ("rule <name>"), `fail` fails the batch
    # before anything is written. Counted per batch as `dq_<name>`.
    row_rules=(
        RowRule("buffer_end_has_duration", "event_type <> 'buffer_end' OR buffer_ms IS NOT NULL"),
        RowRule("error_has_code", "event_type <> 'error' OR error_code IS NOT NULL"),
    ),
)
