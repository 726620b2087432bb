"""Local tables and checkpoints through `weir.LocalFs` (infra/jvm/weir/LocalFs.java): Delta commits a
version, and Spark a checkpoint file, by renaming a temporary file to a name that must not exist
yet. Several JVMs write one table (a stream, a back-fill, maintenance), so of writers racing for a
name exactly one may win; Hadoop's local rename let two win, the second replacing the first's
file. And none of it starts a process, where Hadoop started a `readlink` or a `chmod` for each."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

WRITERS, ROUNDS = 6, 100


def file_context(spark):
    return spark._jvm.org.apache.hadoop.fs.FileContext.getFileContext(
        spark._jsc.hadoopConfiguration())


def hadoop_path(spark, path: Path):
    return spark._jvm.org.apache.hadoop.fs.Path(path.as_uri())


def rename_options(spark, option: str):
    rename = spark._jvm.org.apache.hadoop.fs.Options.Rename
    options = spark._sc._gateway.new_array(rename, 1)
    options[0] = getattr(rename, option)
    return options


def rename(spark, src: Path, dst: Path, option: str = "NONE") -> None:
    file_context(spark).rename(hadoop_path(spark, src), hadoop_path(spark, dst),
                               rename_options(spark, option))


def create(spark, path: Path, data: bytes) -> None:
    """A file written through `FileContext`, as Delta writes a version's temporary file."""
    jvm = spark._jvm
    stream = file_context(spark).create(hadoop_path(spark, path), jvm.java.util.EnumSet.of(
        jvm.org.apache.hadoop.fs.CreateFlag.CREATE), spark._sc._gateway.new_array(
        jvm.org.apache.hadoop.fs.Options.CreateOpts, 0))
    stream.write(bytearray(data))
    stream.close()


def java_exception(err: Py4JJavaError) -> str:
    return str(err.java_exception.getClass().getName())


def forks() -> int:
    """Processes this machine has started since it booted (`processes` in /proc/stat)."""
    line = next(row for row in Path("/proc/stat").read_text().splitlines() if row.startswith("processes "))
    return int(line.split()[1])


FEW = 10   # processes the machine may start during a round for other reasons


def fewest_processes_started(work: Callable[[int], None], rounds: int = 3) -> int:
    """The fewest processes the machine started while `work(round)` ran, over up to `rounds` rounds
    (stopping at one under `FEW`). A test worker beside this one starts processes of its own now and
    then (servers, tools), which fall into one round; a cause in `work` falls into every round."""
    fewest = None
    for round_ in range(rounds):
        before = forks()
        work(round_)
        started = forks() - before
        fewest = started if fewest is None else min(fewest, started)
        if fewest < FEW:
            break
    assert fewest is not None
    return fewest


def test_the_session_takes_local_paths_through_weirs_file_system(spark) -> None:
    fs = file_context(spark).getDefaultFileSystem()
    assert fs.getClass().getName() == "weir.LocalFs"


def race(spark, pool: ThreadPoolExecutor, folder: Path, target: Path) -> tuple[list, list]:
    """Each writer renames its own file onto `target` at the same moment: (winners, refused)."""
    fc, dst, none = file_context(spark), hadoop_path(spark, target), rename_options(spark, "NONE")
    sources = [hadoop_path(spark, folder / f".tmp-{writer}") for writer in range(WRITERS)]
    start = threading.Barrier(WRITERS)

    def write(writer: int) -> str:
        start.wait()
        try:
            fc.rename(sources[writer], dst, none)
            return "won"
        except Py4JJavaError as err:
            refused = java_exception(err) == "org.apache.hadoop.fs.FileAlreadyExistsException"
            return "refused" if refused else java_exception(err)

    outcomes = list(pool.map(write, range(WRITERS)))
    assert set(outcomes) <= {"won", "refused"}, outcomes
    return ([w for w, o in enumerate(outcomes) if o == "won"],
            [w for w, o in enumerate(outcomes) if o == "refused"])


def test_of_writers_racing_to_rename_onto_one_name_exactly_one_wins(spark, tmp_path: Path) -> None:
    """As Delta's writers of one version do. Hadoop's rename had two winners within 100 rounds
    (round 9 in one run): both were told their version was committed, and the file held only
    one's."""
    with ThreadPoolExecutor(WRITERS) as pool:
        for round_ in range(ROUNDS):
            folder = tmp_path / str(round_)
            folder.mkdir()
            for writer in range(WRITERS):
                (folder / f".tmp-{writer}").write_text(f"writer {writer}")
            target = folder / "00001.json"
            won, refused = race(spark, pool, folder, target)
            holds = target.read_text()
            assert len(won) == 1, f"round {round_}: writers {won} won; {target.name} holds {holds!r}"
            assert holds == f"writer {won[0]}"
            # a loser keeps its temporary file: the rename left it as it was
            assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".tmp-")) == sorted(
                f".tmp-{writer}" for writer in refused)


def test_a_rename_answers_as_hadoops_does(spark, tmp_path: Path) -> None:
    created = tmp_path / "created"
    create(spark, created, b"checksummed")
    assert (tmp_path / ".created.crc").is_file()

    # a new name: the file and its checksum move together
    rename(spark, created, tmp_path / "moved")
    assert (tmp_path / "moved").read_text() == "checksummed" and not created.exists()
    assert (tmp_path / ".moved.crc").is_file() and not (tmp_path / ".created.crc").exists()

    # a name that exists is refused and nothing changes; OVERWRITE replaces it
    (tmp_path / "other").write_text("other")
    with pytest.raises(Py4JJavaError) as refused:
        rename(spark, tmp_path / "other", tmp_path / "moved")
    assert java_exception(refused.value) == "org.apache.hadoop.fs.FileAlreadyExistsException"
    assert (tmp_path / "moved").read_text() == "checksummed" and (tmp_path / "other").is_file()
    rename(spark, tmp_path / "other", tmp_path / "moved", "OVERWRITE")
    assert (tmp_path / "moved").read_text() == "other" and not (tmp_path / "other").exists()

    # a missing source or folder is "not found"
    for src, dst in ((tmp_path / "absent", tmp_path / "x"), (tmp_path / "moved", tmp_path / "no" / "x")):
        with pytest.raises(Py4JJavaError) as missing:
            rename(spark, src, dst)
        assert java_exception(missing.value) == "java.io.FileNotFoundException", (src, dst)

    # a folder is renamed by Hadoop's own rename
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "inside").write_text("x")
    rename(spark, tmp_path / "folder", tmp_path / "renamed")
    assert (tmp_path / "renamed" / "inside").read_text() == "x"


def test_permissions_are_set_as_asked(spark, tmp_path: Path) -> None:
    fc = file_context(spark)
    permission = spark._jvm.org.apache.hadoop.fs.permission.FsPermission
    for name, mode in (("a", 0o640), ("b", 0o751), ("c", 0o000)):
        (tmp_path / name).write_text(name)
        fc.setPermission(hadoop_path(spark, tmp_path / name), permission(mode))
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name
    (tmp_path / "shared").mkdir()     # the sticky bit is beyond the nine: Hadoop's chmod sets it
    fc.setPermission(hadoop_path(spark, tmp_path / "shared"), permission(0o1777))
    assert stat.S_IMODE(os.stat(tmp_path / "shared").st_mode) == 0o1777


def test_writing_and_renaming_files_starts_no_process(spark, tmp_path: Path) -> None:
    """What a Delta commit does to the log, ten times: create a temporary file (its permission set),
    rename it to a new version. With Hadoop's file system that started 203 processes; a few started
    by anything else on the machine meanwhile are allowed."""
    def commits(round_: int) -> None:
        log = tmp_path / f"table-{round_}" / "_delta_log"
        log.mkdir(parents=True)
        for version in range(10):
            temporary = log / f".{version:020}.json.tmp"
            create(spark, temporary, b"{}\n")
            rename(spark, temporary, log / f"{version:020}.json")
        assert len(list(log.glob("*.json"))) == 10

    started = fewest_processes_started(commits)
    assert started < FEW, f"{started} processes started by 10 commits' files"


def test_delta_commits_start_no_process(spark, tmp_path: Path) -> None:
    """Delta's own log writes take the same path: a commit puts two files in the table's log (its
    JSON and its checksum), each renamed into place. Eight commits that change only a property
    (no data file, no checkpoint) started 320 processes with Hadoop's file system, 40 a commit."""
    tables = [tmp_path / f"table-{round_}" for round_ in range(3)]
    for path in tables:
        spark.range(0).write.format("delta").save(str(path))

    def commits(round_: int) -> None:
        path = tables[round_]
        for version in range(1, 9):
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('weir.test.version' = '{version}')")
        assert sorted(p.name for p in (path / "_delta_log").glob("*.json"))[-1] == f"{8:020}.json"

    started = fewest_processes_started(commits)
    assert started < FEW, f"{started} processes started by 8 Delta commits"
