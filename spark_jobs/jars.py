"""JVM artifacts (Delta, the Spark Kafka connector) resolved from Maven Central once, then local,
and Weir's own few JVM classes (`infra/jvm`: Spark SQL functions) compiled into one jar.

`python -m spark_jobs.jars` resolves them through Spark's own Ivy into `.cache/ivy`, compiles the
own classes with the JDK's `javac` against pyspark's jars, and records the jar paths; every
session afterwards puts those files on `spark.jars` and needs no network.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from spark_jobs.errors import UserError
from spark_jobs.settings import REPO_ROOT, settings

SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"
# Maven Central holds no spark-token-provider-kafka 4.2.0 (the Kafka connector's one dependency
# missing there); the connector runs with the nearest published build of it instead.
TOKEN_PROVIDER = "org.apache.spark:spark-token-provider-kafka-0-10_2.13"
PACKAGES = (
    f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}",
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
)
RESOLUTIONS = (
    (PACKAGES, TOKEN_PROVIDER),
    ((f"{TOKEN_PROVIDER}:4.0.0",), "org.apache.kafka:kafka-clients"),
)
JVM_SOURCES = REPO_ROOT / "infra" / "jvm"
IVY_SETTINGS = JVM_SOURCES / "ivysettings.xml"   # Maven Central only, see the file
OWN_JAR = "weir-jvm.jar"


class JarsMissingError(UserError, RuntimeError):
    pass


def cache_dir() -> Path:
    """Where the resolved artifacts are kept: `WEIR_JAR_CACHE` (default `.cache/jars`)."""
    return settings().jar_cache


def class_archive() -> Path:
    """The class-data-sharing archive of a Weir driver's classes, kept beside the jars it was made
    with (`python -m spark_jobs.class_archive`, run by `make setup`)."""
    return cache_dir() / "driver-classes.jsa"


def manifest_path() -> Path:
    """The list of resolved jar files that every session puts on `spark.jars`."""
    return cache_dir() / "jars.txt"


def resolved_jars() -> list[str]:
    """The cached jar files, or a clear error telling how to fetch them."""
    manifest = manifest_path()
    if not manifest.is_file():
        raise JarsMissingError(f"JVM artifacts not resolved yet ({manifest} missing): run `make setup`")
    jars = [line for line in manifest.read_text().splitlines() if line]
    missing = [j for j in jars if not Path(j).is_file()]
    if missing:
        raise JarsMissingError(f"cached jar {missing[0]} is missing: run `make setup`")
    return jars


def _artifact(jar: Path) -> str:
    """`org.group_artifact-1.2.3.jar` or `artifact-1.2.3.jar` → `artifact`."""
    stem = jar.stem.split("_", 1)[-1] if "_" in jar.stem.split("-", 1)[0] else jar.stem
    return re.sub(r"-\d[\w.\-]*$", "", stem)


def resolve() -> list[str]:
    """The jars every session puts on `spark.jars`: the resolved packages, then Weir's own jar.
    Each is redone only when what it is made of changed: Ivy when the packages or its settings
    did, `javac` when a source under `infra/jvm` did."""
    packages = _resolved_packages()
    own, stamp, digest = cache_dir() / OWN_JAR, cache_dir() / "own-jar.txt", own_sources_digest()
    rebuilt = not (own.is_file() and stamp.is_file() and stamp.read_text() == digest)
    if rebuilt:
        build_own_jar(packages)
        stamp.write_text(digest)
    jars = [*packages, str(own)]
    # Written only when something changed: the drivers' class archive is recorded again after it.
    manifest, text = manifest_path(), "\n".join(jars) + "\n"
    if rebuilt or not manifest.is_file() or manifest.read_text() != text:
        manifest.write_text(text)
    return jars


def _resolved_packages() -> list[str]:
    """Resolve the packages through Ivy into the cache (a no-op when the manifest is current).
    Jars that pyspark already ships (Jackson, Hadoop, Parquet, ...) are left out."""
    wanted = repr(RESOLUTIONS) + IVY_SETTINGS.read_text()
    manifest, stamp = manifest_path(), cache_dir() / "packages.txt"
    if manifest.is_file() and stamp.is_file() and stamp.read_text() == wanted:
        jars = [j for j in manifest.read_text().splitlines() if j and Path(j).name != OWN_JAR]
        if jars and all(Path(j).is_file() for j in jars):
            return jars
    import pyspark

    ivy = cache_dir() / "ivy"
    shutil.rmtree(ivy / "jars", ignore_errors=True)   # what Ivy resolves now, nothing stale
    for index in range(len(RESOLUTIONS)):
        # Ivy runs when the JVM starts, so each resolution needs a JVM (a process) of its own.
        subprocess.run([sys.executable, "-m", "spark_jobs.jars", "--resolution", str(index)],
                       check=True)
    shipped = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    jars = sorted(str(p) for p in (ivy / "jars").glob("*.jar") if _artifact(p) not in shipped)
    if not jars:
        raise JarsMissingError(f"Ivy resolved nothing into {ivy / 'jars'}")
    stamp.write_text(wanted)
    return jars


def own_sources_digest() -> str:
    digest = hashlib.sha256()
    for source in sorted(JVM_SOURCES.rglob("*.java")):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def build_own_jar(resolved: list[str]) -> Path:
    """Compile `infra/jvm/**/*.java` against pyspark's jars and the `resolved` ones (Delta's) into
    `WEIR_JAR_CACHE/weir-jvm.jar`."""
    import pyspark

    classpath = os.pathsep.join([str(Path(pyspark.__file__).parent / "jars" / "*"), *resolved])
    sources = [str(p) for p in sorted(JVM_SOURCES.rglob("*.java"))]
    jar = cache_dir() / OWN_JAR
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        raise JarsMissingError("javac and jar (a JDK 17) are needed to build Weir's JVM classes")
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run([javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", classes, *sources],
                       check=True)
        tmp = jar.with_suffix(".tmp")
        subprocess.run([jar_tool, "cf", str(tmp), "-C", classes, "."], check=True)
        tmp.replace(jar)
    return jar


def _resolve_one(index: int) -> None:
    from pyspark.sql import SparkSession

    packages, excludes = RESOLUTIONS[index]
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("weir-resolve-jars")
        .config("spark.jars.packages", ",".join(packages))
        .config("spark.jars.ivy", str(cache_dir() / "ivy"))
        .config("spark.jars.ivySettings", str(IVY_SETTINGS))
        .config("spark.ui.enabled", "false")
    )
    if excludes:
        builder = builder.config("spark.jars.excludes", excludes)
    builder.getOrCreate().stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--resolution"]:
        _resolve_one(int(sys.argv[2]))
    else:
        print(f"{len(resolve())} JVM artifacts cached in {cache_dir()}")
