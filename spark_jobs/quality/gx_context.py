"""The Great Expectations context of a WEIR_HOME: created once per process and reused.

It is an ephemeral context (no `great_expectations.yml` to keep in sync) whose suite and
validation-result stores and Data Docs site are plain folders under `WEIR_HOME/dq`, so results
and docs accumulate across runs and processes:

    dq/expectations/   the suites as last run (JSON)
    dq/validations/    every validation result (JSON), what Data Docs are built from
    dq/docs/           the Data Docs site; `dq/docs/index.html` is its entry page

Data are validated as Spark DataFrames handed over per run (a Spark data source with one
whole-dataframe asset per table), never re-read by Great Expectations itself.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.home import WeirHome

if TYPE_CHECKING:
    from great_expectations.core.batch_definition import BatchDefinition
    from great_expectations.data_context import AbstractDataContext

log = logging.getLogger(__name__)
DATASOURCE = "weir_spark"
BATCH_DEFINITION = "whole_dataframe"
SITE = "weir"
_lock = threading.Lock()
_contexts: dict[Path, AbstractDataContext] = {}
_preloading: threading.Thread | None = None


def docs_dir(home: WeirHome) -> Path:
    return home.dq / "docs"


def docs_index(home: WeirHome) -> Path:
    return docs_dir(home) / "index.html"


def _filesystem_store(class_name: str, directory: Path) -> dict[str, Any]:
    return {"class_name": class_name,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(directory)}}


def _in_memory_store(class_name: str) -> dict[str, Any]:
    return {"class_name": class_name, "store_backend": {"class_name": "InMemoryStoreBackend"}}


@contextlib.contextmanager
def exclusive(home: WeirHome) -> Iterator[None]:
    """Hold the DQ lock of `home` (an exclusive `flock` on `dq/.run.lock`, waiting for it): two DQ
    runs at once replace each other's suites in the store, and one fails with "ExpectationSuite
    ... not found". The kernel releases the lock when its holder dies."""
    home.dq.mkdir(parents=True, exist_ok=True)
    with open(home.dq / ".run.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def preload() -> None:
    """Import Great Expectations on a thread of its own, once per process. The import alone takes
    6-8 s of one core on this machine; a DQ run starts it before it starts Spark, whose JVM start
    leaves that core waiting. The first use of the module waits for the import to end, or raises
    its error if it failed. A process that ends sooner waits for it at exit: an import (of C
    extensions among others) cut off by the interpreter's shutdown can abort the process."""
    global _preloading
    with _lock:
        if _preloading is None and "great_expectations" not in sys.modules:
            _preloading = threading.Thread(target=_import, name="weir-gx-import", daemon=True)
            _preloading.start()
            atexit.register(_preloading.join)


def _import() -> None:
    try:
        import great_expectations  # noqa: F401
        from great_expectations.data_context.types.base import DataContextConfig  # noqa: F401
    except Exception:   # the caller's own import raises it, where it is reported
        log.debug("Great Expectations failed to import ahead of its use", exc_info=True)


def context_for(home: WeirHome) -> AbstractDataContext:
    """The (cached) context whose stores and Data Docs live under `home.dq`."""
    root = home.dq.absolute()
    with _lock:
        context = _contexts.get(root)
        if context is None:
            context = _create(home)
            _contexts[root] = context
        return context


def _create(home: WeirHome) -> AbstractDataContext:
    import great_expectations as gx
    from great_expectations.data_context.types.base import DataContextConfig

    root = home.dq.absolute()
    root.mkdir(parents=True, exist_ok=True)
    config = DataContextConfig(
        stores={
            "expectations_store": _filesystem_store("ExpectationsStore", root / "expectations"),
            "validation_results_store": _filesystem_store("ValidationResultsStore", root / "validations"),
            # Validation definitions and checkpoints only wire a run together: rebuilt every run.
            "validation_definition_store": _in_memory_store("ValidationDefinitionStore"),
            "checkpoint_store": _in_memory_store("CheckpointStore"),
        },
        expectations_store_name="expectations_store",
        validation_results_store_name="validation_results_store",
        checkpoint_store_name="checkpoint_store",
        data_docs_sites={SITE: {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir(home))},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }},
        analytics_enabled=False,
        progress_bars={"globally": False},  # type: ignore[arg-type]
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    # Weir caches (and un-caches) each frame itself; GE would persist it and never release it.
    context.data_sources.add_spark(name=DATASOURCE, persist=False)
    log.info("Great Expectations context on %s", root)
    return context


def batch_definition(context: AbstractDataContext, asset: str) -> BatchDefinition:
    """The whole-dataframe batch definition of `asset` (one asset per table), created on first use."""
    datasource = context.data_sources.get(DATASOURCE)
    try:
        data_asset = datasource.get_asset(asset)
    except LookupError:
        data_asset = None
    if data_asset is None:
        data_asset = datasource.add_dataframe_asset(name=asset)  # type: ignore[attr-defined]
    try:
        return data_asset.get_batch_definition(BATCH_DEFINITION)
    except LookupError:
        pass
    return data_asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def build_docs(home: WeirHome, identifiers: list[Any] | None = None) -> Path:
    """Render the pages of the given validation results (all stored ones when None) and rebuild
    the site index, which lists every stored run; returns `dq/docs/index.html`."""
    context = context_for(home)
    context.build_data_docs(site_names=[SITE], resource_identifiers=identifiers or None)
    index = docs_index(home)
    if not index.is_file():
        raise RuntimeError(f"Great Expectations built no Data Docs index at {index}")
    return index
