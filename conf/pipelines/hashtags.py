"""Social posts → hashtag counts over 10-minute windows sliding every minute.

A second, small pipeline that exists only as this declaration: parse, validate, dedupe, derive
and window are the platform's shared transforms.
"""

from spark_jobs.catalog import Aggregation, Field, FileSource, Pipeline

PIPELINE = Pipeline(
    name="hashtags",
    description="Hashtag counts over a 10-minute window sliding every minute",
    events_table="hashtag_posts",
    key="post_id",
    event_time="event_time",
    fields=(
        Field("post_id", required=True),
        Field("user_id", required=True),
        Field("text", required=True),
        Field("event_time", "timestamp", required=True),
        Field("lang"),
    ),
    derived={"hashtags": r"array_distinct(transform(regexp_extract_all(text, '#(\\w+)', 1), h -> lower(h)))"},
    aggregation=Aggregation(
        table="hashtag_counts_10m",
        window="10 minutes",
        slide="1 minute",
        explode={"hashtag": "hashtags"},
        group_by=("hashtag",),
        measures={"posts": "count(1)", "users": "approx_count_distinct(user_id)"},
        watermark="15 minutes",
    ),
    source=FileSource(),
)
