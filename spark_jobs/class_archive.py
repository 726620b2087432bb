"""`python -m spark_jobs.class_archive` (run by `make setup`): the class-data-sharing archive of a
Weir driver, which every driver JVM then maps at its start (`session.driver_java_options`).

A JVM parses, verifies and links each class it loads from its jars, and a Spark driver loads
tens of thousands before its first batch. HotSpot can record the classes a run loaded into an
archive as the JVM exits (`-XX:ArchiveClassesAtExit`), and a later JVM with the same JDK and
class path maps them ready-made. The run recorded here is a real driver, `weir run playback
--once` over two small generated landing files in a home of its own, so the archive holds what a
driver loads: the session, the landing reader, Delta's reads, writes and MERGE, the three queries.

The JVM writes the archive under a temporary name; it is renamed into place only once the run
ended well, so a driver never maps a partial one. The archive belongs to the jars beside it: a
JVM with other jars, another JDK or another class path starts without it (and loses only the
time the archive saves). So it is recorded again only when what it was made with changed (the
stamp beside it: Weir's jars, pyspark's, the JDK), not at every `make setup`."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from spark_jobs.generator import generate
from spark_jobs.home import WeirHome
from spark_jobs.jars import class_archive, manifest_path
from spark_jobs.session import pyspark_jars

PIPELINE = "playback"


def record(target: Path) -> Path:
    """Run a driver that records its classes, and put the archive at `target`."""
    partial = target.with_name(f"{target.name}.partial")
    # The recording driver must not map the archive it replaces (a JVM writes a dynamic archive
    # only on top of the JDK's own).
    target.unlink(missing_ok=True)
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="weir-class-archive-") as tmp:
        home = WeirHome(Path(tmp))
        generate(home.landing(PIPELINE), files=2, sessions_per_file=6, seed=1)
        # Only the jar cache of the environment: the recording is a local driver whatever master,
        # control store or Kafka the caller's WEIR_* variables name.
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEIR_") or k == "WEIR_JAR_CACHE"}
        env.update(WEIR_HOME=str(home.root), JAVA_TOOL_OPTIONS=f"-XX:ArchiveClassesAtExit={partial}")
        run = subprocess.run([sys.executable, "-m", "spark_jobs.cli", "run", PIPELINE, "--once"],
                             env=env, capture_output=True, text=True)
    if run.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = "\n".join((run.stdout + run.stderr).splitlines()[-20:])
        raise RuntimeError(f"the recording driver failed (exit {run.returncode}):\n{tail}")
    partial.replace(target)
    return target


def made_with() -> str:
    """What an archive depends on: the jars a driver loads (Weir's manifest, pyspark's jars), the
    JDK that maps it, and the recording run (this module)."""
    java = shutil.which("java")
    jdk = "no java on PATH"
    if java:
        binary = Path(java).resolve()
        release = binary.parents[1] / "release"   # the JDK's build, updated in place
        jdk = f"{binary}\n{release.read_text() if release.is_file() else ''}"
    recording = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    # a jar the manifest names is rebuilt in place (Weir's own, at each change of its classes): the
    # JVM refuses an archive whose jars changed, silently, so a changed jar records it again
    built = [f"{jar} {hashlib.sha256(Path(jar).read_bytes()).hexdigest()}"
             for jar in manifest_path().read_text().split() if Path(jar).name.startswith("weir")]
    return "\n".join([manifest_path().read_text(), *built,
                      *sorted(p.name for p in pyspark_jars().iterdir()), jdk, recording])


def main() -> int:
    console = Console()
    archive = class_archive()
    stamp = archive.with_suffix(".txt")
    wanted = made_with()
    if archive.is_file() and stamp.is_file() and stamp.read_text() == wanted:
        console.print(f"class archive {archive} is current")
        return 0
    started = time.monotonic()
    try:
        with console.status("Recording a Weir driver's classes for class data sharing (about a minute)"):
            record(archive)
    except RuntimeError as err:
        console.print(f"class archive not recorded: {err}", soft_wrap=True, markup=False)
        return 1
    stamp.write_text(wanted)
    console.print(f"class archive {archive} ({archive.stat().st_size / 2**20:.0f} MB) "
                  f"recorded in {time.monotonic() - started:.0f} s", soft_wrap=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
