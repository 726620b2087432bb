"""Realistic playback events as landing files: whole viewing sessions (start, heartbeats,
rebuffering, bitrate changes, errors, end), plus the faults of real feeds: malformed and invalid
lines, and duplicates re-sent later. Deterministic for a seed; returns what it wrote, so tests
can state the expected result up front."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CDNS = ("akamai", "fastly", "cloudfront", None)
DEVICES = ("tv", "mobile", "web", "console")
COUNTRIES = ("DE", "US", "FR", "BR", "JP", "IN")
BAD_LINES = (
    '{"event_id": "broken", ',                                                  # malformed JSON
    '["not", "an", "object"]',                                                  # not an object
    '{"session_id": "s", "user_id": "u", "content_id": "c001", "event_type": "start", '
    '"event_time": "2026-11-20T10:00:00Z"}',                                   # missing event_id
    '{"event_id": "X-TYPE", "session_id": "s", "user_id": "u", "content_id": "c001", '
    '"event_type": "rewind", "event_time": "2026-11-20T10:00:00Z"}',           # unknown event_type
    '{"event_id": "X-TIME", "session_id": "s", "user_id": "u", "content_id": "c001", '
    '"event_type": "start", "event_time": "20/11/2026 10:00"}',                # bad timestamp
    '{"event_id": "X-RANGE", "session_id": "s", "user_id": "u", "content_id": "c001", '
    '"event_type": "bitrate_change", "event_time": "2026-11-20T10:00:00Z", "bitrate_kbps": 250000}',
    '{"event_id": "X-TYPED", "session_id": "s", "user_id": "u", "content_id": "c001", '
    '"event_type": "buffer_end", "event_time": "2026-11-20T10:00:00Z", "buffer_ms": "long"}',
)


@dataclass
class Written:
    """What a generator run wrote: every line, and the set of valid distinct event ids."""

    files: list[Path] = field(default_factory=list)
    lines: int = 0
    bad_lines: int = 0
    duplicate_lines: int = 0
    event_ids: set[str] = field(default_factory=set)

    def add(self, other: Written) -> None:
        self.files += other.files
        self.lines += other.lines
        self.bad_lines += other.bad_lines
        self.duplicate_lines += other.duplicate_lines
        self.event_ids |= other.event_ids


def session_events(rng: random.Random, start: dt.datetime, n_contents: int,
                   prefix: str) -> Iterator[dict[str, object]]:
    """One viewing session, in event-time order."""
    session = f"{prefix}-s{rng.randrange(10**9):09d}"
    base = {
        "session_id": session, "user_id": f"u{rng.randrange(5000):05d}",
        "content_id": f"c{rng.randrange(1, n_contents + 1):03d}",
        "device": rng.choice(DEVICES), "country": rng.choice(COUNTRIES),
    }
    cdn = rng.choice(CDNS)
    if cdn:
        base["cdn"] = cdn
    t, position, bitrate = start, 0.0, rng.choice((1500, 3000, 4500, 6000))
    seq = 0

    def event(kind: str, **extra: object) -> dict[str, object]:
        nonlocal seq
        seq += 1
        return {"event_id": f"{session}-{seq:04d}", "event_type": kind,
                "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                **base, "bitrate_kbps": bitrate, "position_s": round(position, 1), **extra}

    yield event("start")
    for _ in range(rng.randrange(3, 12)):
        step = rng.uniform(5, 30)
        t += dt.timedelta(seconds=step)
        position += step
        roll = rng.random()
        if roll < 0.15:
            yield event("buffer_start")
            t += dt.timedelta(milliseconds=rng.randrange(200, 6000))
            yield event("buffer_end", buffer_ms=rng.randrange(200, 6000))
        elif roll < 0.25:
            bitrate = rng.choice((800, 1500, 3000, 4500, 6000, 8000))
            yield event("bitrate_change")
        elif roll < 0.28:
            yield event("error", error_code=rng.choice(("E1001", "E2002", "DRM-7")))
        elif roll < 0.33:
            yield event("pause")
            t += dt.timedelta(seconds=rng.uniform(1, 20))
            yield event("resume")
        else:
            yield event("heartbeat")
    yield event("end")


def write_lines(landing: Path, name: str, lines: list[str]) -> Path:
    """Write a landing file completely under a hidden name, then rename it into view."""
    landing.mkdir(parents=True, exist_ok=True)
    final = landing / name
    hidden = landing / f".{name}.tmp"
    hidden.write_text("".join(line + "\n" for line in lines))
    os.replace(hidden, final)
    return final


def generate(landing: Path, *, files: int = 4, sessions_per_file: int = 20, seed: int = 0,
             start: dt.datetime | None = None, bad_ratio: float = 0.02, dup_ratio: float = 0.03,
             n_contents: int = 40, prefix: str = "g") -> Written:
    """Write `files` landing files of whole sessions starting around `start` (UTC)."""
    rng = random.Random(seed)
    start = start or dt.datetime(2026, 11, 19, 20, 0, tzinfo=dt.UTC)
    out = Written()
    good: list[str] = []
    for index in range(files):
        lines: list[str] = []
        for _ in range(sessions_per_file):
            at = start + dt.timedelta(minutes=index * 5, seconds=rng.uniform(0, 300))
            for ev in session_events(rng, at, n_contents, f"{prefix}{seed}"):
                line = json.dumps(ev, separators=(",", ":"))
                lines.append(line)
                out.event_ids.add(str(ev["event_id"]))
                if rng.random() < bad_ratio:
                    lines.append(rng.choice(BAD_LINES))
                    out.bad_lines += 1
        fresh = [line for line in lines if line not in BAD_LINES]
        for line in rng.sample(good, k=min(len(good), int(len(lines) * dup_ratio))):
            lines.append(line)       # a duplicate, re-sent in a later file
            out.duplicate_lines += 1
        good += fresh
        out.lines += len(lines)
        out.files.append(write_lines(landing, f"{prefix}{seed}-{index:05d}.jsonl", lines))
    return out
