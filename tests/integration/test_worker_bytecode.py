"""pyspark's archives carry their bytecode (`spark_jobs.worker_bytecode`, run by `make setup`):
the Python processes Spark starts import pyspark from them without compiling it, and bytecode
never stands in for a source other than its own."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from spark_jobs.worker_bytecode import add_bytecode, has_bytecode, spark_archives


def imported(archive: Path, module: str) -> tuple[str, str]:
    """`module`'s VALUE and file as a fresh interpreter imports them from `archive` alone."""
    code = (f"import sys; sys.path.insert(0, {str(archive)!r}); "
            f"import {module} as m; print(m.VALUE); print(m.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0], out[1]


def write_archive(path: Path, files: dict[str, str | bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)


def test_a_module_is_imported_from_its_bytecode_and_a_changed_source_wins(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    write_archive(archive, {"weirmod/__init__.py": "VALUE = 'first'\n", "weirmod/data.txt": "kept"})
    assert not has_bytecode(archive)

    assert add_bytecode(archive) == 1
    assert has_bytecode(archive)
    assert imported(archive, "weirmod") == ("first", f"{archive}/weirmod/__init__.pyc")
    with zipfile.ZipFile(archive) as zf:
        assert zf.read("weirmod/data.txt") == b"kept"
        stale = zf.read("weirmod/__init__.pyc")

    # The source changes and the old bytecode stays beside it: the source is what is imported.
    write_archive(archive, {"weirmod/__init__.py": "VALUE = 'second'\n",
                            "weirmod/__init__.pyc": stale})
    assert imported(archive, "weirmod")[0] == "second"


def test_the_python_workers_of_a_session_import_pyspark_from_bytecode(spark) -> None:
    archives = {a.name: a for a in spark_archives()}
    assert "pyspark.zip" in archives, f"no pyspark.zip among {sorted(archives)}"
    assert all(has_bytecode(a) for a in archives.values()), "`make setup` compiles them"

    @F.udf(StringType())
    def pyspark_file(_: int) -> str:
        import pyspark

        return pyspark.__file__

    loaded = spark.range(1).select(pyspark_file("id")).first()[0]
    assert loaded == f"{archives['pyspark.zip']}/pyspark/__init__.pyc"
