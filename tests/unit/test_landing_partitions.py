"""How the landing source cuts a micro-batch into tasks (`landing.plan_partitions`): every byte of
the batch once, in manifest order, in equal ranges, bounded by `max_bytes`, and spread over the
cores asked for once the batch is large enough to be worth it."""

from __future__ import annotations

import pytest

from spark_jobs.landing import plan_partitions
from spark_jobs.landing_manifest import FileEntry, Position

MB = 1 << 20


def entries(*sizes: int) -> list[FileEntry]:
    return [FileEntry(path=f"/landing/f{i}.jsonl", size=size, mtime_ns=i, digest=f"{i:032x}")
            for i, size in enumerate(sizes)]


def covered(parts) -> list[tuple[str, int, int]]:
    return [(r.entry.path, r.start, r.end) for part in parts for r in part.ranges]


def merged(ranges: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Adjacent ranges of the same file joined: what the ranges read, whatever their cuts."""
    out: list[tuple[str, int, int]] = []
    for path, a, b in ranges:
        if out and out[-1][0] == path and out[-1][2] == a:
            out[-1] = (path, out[-1][1], b)
        else:
            out.append((path, a, b))
    return out


def sizes(parts) -> list[int]:
    return [sum(r.end - r.start for r in part.ranges) for part in parts]


def test_a_running_streams_batch_of_small_files_is_read_on_every_core():
    files = entries(*[900_000] * 8)                       # 7.2 MB: about 29 k lines of 250 bytes
    parts = plan_partitions(files, Position(0, 0), Position(8, 0), max_bytes=16 * MB,
                            min_bytes=MB, min_partitions=2)
    assert sizes(parts) == [3_600_000, 3_600_000]
    assert merged(covered(parts)) == [(f.path, 0, f.size) for f in files]


def test_one_file_is_cut_evenly_and_a_cut_may_fall_inside_it():
    files = entries(3 * MB, 4 * MB)
    parts = plan_partitions(files, Position(0, 0), Position(2, 0), max_bytes=16 * MB,
                            min_bytes=MB, min_partitions=2)
    assert sizes(parts) == [7 * MB // 2, 7 * MB // 2]
    assert covered(parts) == [(files[0].path, 0, 3 * MB), (files[1].path, 0, MB // 2),
                              (files[1].path, MB // 2, 4 * MB)]


def test_a_small_batch_stays_one_task():
    parts = plan_partitions(entries(300_000, 400_000), Position(0, 0), Position(2, 0),
                            max_bytes=16 * MB, min_bytes=MB, min_partitions=8)
    assert sizes(parts) == [700_000]


@pytest.mark.parametrize("min_partitions", [1, 2, 4])
def test_a_backlogs_batch_is_bounded_by_max_bytes_and_starts_where_the_last_one_ended(min_partitions):
    files = entries(50 * MB, 0, 90 * MB)
    start, end = Position(0, 10 * MB + 7), Position(2, 80 * MB)   # 120 MB, from inside a file
    parts = plan_partitions(files, start, end, max_bytes=16 * MB, min_bytes=MB,
                            min_partitions=min_partitions)
    assert len(parts) == 8 and max(sizes(parts)) <= 16 * MB and max(sizes(parts)) - min(sizes(parts)) < 8
    assert merged(covered(parts)) == [(files[0].path, 10 * MB + 7, 50 * MB), (files[2].path, 0, 80 * MB)]


def test_nothing_to_read_plans_no_task():
    files = entries(0, 5)
    assert plan_partitions(files, Position(0, 0), Position(1, 0), max_bytes=MB, min_partitions=2) == []
    assert plan_partitions(files, Position(1, 5), Position(2, 0), max_bytes=MB, min_partitions=2) == []
