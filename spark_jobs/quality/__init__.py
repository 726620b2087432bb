"""Data quality of a pipeline's outputs with Great Expectations 1.x.

`run_dq(pipeline, date_from, date_to)` validates silver and gold with the suites kept beside the
catalog entry (`conf/pipelines/<name>.expectations.yaml`), appends the results to
`tables/platform/dq_results` and writes Data Docs to `WEIR_HOME/dq/docs/index.html`. Importing this
package is cheap (no Spark, no Great Expectations): DAG files import it.
"""

from __future__ import annotations

from spark_jobs.quality.report import DqReport, ExpectationOutcome
from spark_jobs.quality.runner import NoDataError, run_dq

__all__ = ["DqReport", "ExpectationOutcome", "NoDataError", "run_dq"]
