"""`python -m spark_jobs.worker_bytecode` (run by `make setup`): pyspark's archives with their
bytecode, so a Python process that Spark starts does not compile pyspark first.

Spark puts `SPARK_HOME/python/lib/pyspark.zip` (and py4j's) first on the PYTHONPATH of every
Python process it starts: the driver under spark-submit, an executor's worker daemon, and the
worker of each streaming operator it runs in Python. Python imports from a zip without ever
writing bytecode, so each of them compiled pyspark's modules from source: 1.8-2.0 s to import a
`transformWithState` driver worker, against 0.5 s from bytecode, on this machine. Spark waits a
fixed 10 s for a worker to connect back (`PythonWorkerFactory`, not configurable); on a loaded
host a sessions query, whose state function ran in Python until 2026-11, failed at its start with
"Python worker failed to connect back", which ends the driver.

This adds beside each module its bytecode where zipimport looks for it (`module.pyc` next to
`module.py`), in checked-hash form: Python compares it with the hash of the source in the same
archive and compiles the source when they differ, so bytecode never stands in for another
source. An archive is rewritten under a temporary name and renamed into place; one that already
holds this interpreter's bytecode is left as it is."""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc
from pathlib import Path


def spark_archives() -> list[Path]:
    """The archives Spark puts on its Python processes' path: the installed pyspark's own."""
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))


def has_bytecode(archive: Path) -> bool:
    """Whether every module of `archive` has bytecode of this interpreter beside it."""
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        return all(f"{n}c" in names and zf.read(f"{n}c")[:4] == importlib.util.MAGIC_NUMBER
                   for n in names if n.endswith(".py"))


def add_bytecode(archive: Path) -> int:
    """Rewrite `archive` with each module's checked-hash bytecode beside it; the modules compiled."""
    partial = archive.with_name(f"{archive.name}.partial")
    compiled = 0
    with zipfile.ZipFile(archive) as zin, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.endswith(".pyc"):
                continue  # another interpreter's: written afresh below
            source = zin.read(info)
            zout.writestr(info, source)
            if not info.filename.endswith(".py"):
                continue
            # The file name zipimport gives the module, so tracebacks read as before.
            code = compile(source, f"{archive}{os.sep}{info.filename}", "exec", dont_inherit=True)
            bytecode = _code_to_hash_pyc(code, importlib.util.source_hash(source), checked=True)
            zout.writestr(zipfile.ZipInfo(f"{info.filename}c", info.date_time), bytes(bytecode))
            compiled += 1
    partial.replace(archive)
    return compiled


def main() -> int:
    archives = spark_archives()
    if not archives:
        print("no archive under pyspark/python/lib: nothing to compile", file=sys.stderr)
        return 0
    for archive in archives:
        if has_bytecode(archive):
            print(f"{archive.name}: bytecode already in place")
        else:
            print(f"{archive.name}: {add_bytecode(archive)} module(s) compiled into it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
