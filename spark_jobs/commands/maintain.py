"""`weir maintain P [--retain-hours H]`: compact the small files of every table the pipeline writes
(bronze, quarantine, silver, gold, sessions), each sorted by the columns its readers skip files by,
and VACUUM them. VACUUM never goes below Delta's safe retention (7 days by default), so readers and
streams still reading older files are not broken."""

from __future__ import annotations

import argparse
import json

from spark_jobs import catalog
from spark_jobs.commands import pipeline_arg
from spark_jobs.control import eventlog
from spark_jobs.control.maintenance import SAFE_RETENTION_HOURS, maintain
from spark_jobs.errors import UserError
from spark_jobs.home import WeirHome
from spark_jobs.session import build_session


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("maintain", help="compact and VACUUM every table a pipeline writes",
                              description=__doc__)
    p.add_argument("pipeline", type=pipeline_arg)
    p.add_argument("--retain-hours", type=int, default=SAFE_RETENTION_HOURS,
                   help=f"VACUUM retention (at least {SAFE_RETENTION_HOURS})")
    p.add_argument("--actor", help="who asked (event log); default $WEIR_ACTOR or the OS user")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.retain_hours < SAFE_RETENTION_HOURS:
        raise UserError(f"--retain-hours {args.retain_hours} is below the safe retention "
                        f"({SAFE_RETENTION_HOURS} h): files a running stream may still read would go")
    home = WeirHome.from_env()
    pipeline = catalog.load(args.pipeline)
    spark = build_session(f"weir-maintain-{pipeline.name}")
    try:
        result = maintain(spark, pipeline, home, retain_hours=args.retain_hours)
    except Exception as err:
        eventlog.record(pipeline.name, "maintenance", "failed", actor=args.actor, reason=str(err)[:500],
                        home=home)
        raise
    eventlog.record(pipeline.name, "maintenance", "ok", actor=args.actor, details=result, home=home)
    print(json.dumps(result) if args.json else
          "; ".join(f"{layer}: {r['files_removed']} files compacted into {r['files_added']} sorted by "
                    f"{', '.join(r['sorted_by'])}, vacuumed (retention {r['retain_hours']} h)"
                    for layer, r in result.items()))
    return 0
