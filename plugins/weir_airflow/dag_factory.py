"""Every DAG of a pipeline, declared from its catalog entry. DAG files call `pipeline_dags(name)`
and nothing else: no I/O beyond importing the catalog entry, heavy imports only inside tasks.

For pipeline P:
- `P_stream`: deploy the stream and keep it alive (deferrable supervision, restart policy);
- `P_stop`: stop at a batch boundary, stay stopped; `P_restart`: the on-call restart with a reason
  (plain, from a checkpoint backup, or after a checkpoint reset: those two after an approval of
  their dry-run plan), then a new `P_stream` run;
- `P_backfill`: one run per event date (the day its data interval covers: the scheduled midnight
  run reconciles the day that just ended), then a DQ check of that date; its back-fill task reads
  bronze and the dimension (inlets) and emits an asset event for silver, quarantine and gold
  with the date in the event's extra (outlets);
- `P_dq`: the expectations over recent partitions, hourly;
- `P_checkpoint`: on-call checkpoint actions, the destructive ones (restore, rewind, reset, prune)
  after an approval of their dry-run plan; `P_checkpoint_backup`: hourly backup + prune;
- `P_refresh`: full refresh (`weir refresh`), after an approval of its dry-run plan;
- `P_maintenance`: hourly compaction and VACUUM of every table the pipeline writes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, Param, get_current_context, task

from spark_jobs import catalog
from spark_jobs.checkpoints import DESTRUCTIVE
from spark_jobs.control.stop import GRACEFUL_TIMEOUT_S
from weir_airflow.approval import PlanApprovalOperator
from weir_airflow.assets import annotate_backfill_events, backfill_inlets, backfill_outlets
from weir_airflow.callbacks import alert_on_failure, pipeline_tag
from weir_airflow.operators import (
    StreamRestartOperator,
    StreamStopOperator,
    StreamSupervisorOperator,
    actor_of,
)
from weir_airflow.tasks import (
    approved_checkpoint_action,
    approved_refresh,
    backfill_date,
    checkpoint_action,
    checkpoint_plan,
    dq_check,
    maintain,
    recent_dates,
)
from weir_airflow.tasks import refresh_plan as plan_of

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
BACKUPS_KEPT = 24
# P_restart's modes, and the checkpoint action each runs after the stop (a plain restart: none).
RESTART_MODES = {"restart": None, "restore_backup": "restore", "reset": "reset"}
CHECKPOINT_ACTIONS = ("inspect", "validate", "backup", "backups", "restore", "rewind", "reset", "prune",
                      "compat")


def _actor() -> str:
    return actor_of(get_current_context())


def pipeline_dags(name: str) -> dict[str, DAG]:
    """The DAGs of pipeline `name`, by dag_id."""
    pipeline = catalog.load(name)
    common: dict[str, Any] = {
        "start_date": START, "catchup": False,
        "default_args": {"owner": pipeline.owner, "retries": 0, "on_failure_callback": alert_on_failure},
    }
    dags: dict[str, DAG] = {}
    tags = ["weir", name, pipeline_tag(name)]   # the alert callback reads the pipeline from its tag

    with DAG(f"{name}_stream", schedule=None, max_active_runs=1, tags=[*tags, "stream"],
             description=f"Deploy and supervise {name}: {pipeline.description}",
             doc_md=__doc__, **common) as stream_dag:
        # Retries cover the supervisor dying with its scheduler or worker (a retry adopts the live
        # driver); a spent restart budget fails for good.
        StreamSupervisorOperator(task_id="supervise", pipeline=name, retries=3,
                                 retry_delay=dt.timedelta(seconds=15))
    dags[stream_dag.dag_id] = stream_dag

    with DAG(f"{name}_stop", schedule=None, max_active_runs=1, tags=[*tags, "stream"],
             description=f"Stop {name} at a batch boundary; it stays stopped until deployed again",
             render_template_as_native_obj=True,
             params={"reason": Param("", type="string", description="why the stream is stopped"),
                     "graceful_timeout_s": Param(int(GRACEFUL_TIMEOUT_S), type="integer", minimum=1)},
             **common) as stop_dag:
        StreamStopOperator(task_id="stop", pipeline=name, reason="{{ params.reason }}",
                           graceful_timeout_s="{{ params.graceful_timeout_s }}")
    dags[stop_dag.dag_id] = stop_dag



    # A plain restart stops at a batch boundary and resumes from the same checkpoint (nothing is
    # lost or rewritten): it runs at once. A restore or reset rewrites the checkpoint: its dry-run
    # plan waits for a person's approval (which replaced the old `confirm` Param), as P_checkpoint.
    with DAG(f"{name}_restart", schedule=None, max_active_runs=1, tags=[*tags, "stream", "on-call"],
             description=f"On-call restart of {name} (with a reason; from a checkpoint backup or after "
                         "a reset once their plan is approved)",
             render_template_as_native_obj=True,
             params={
                 "reason": Param(type="string", minLength=3, description="why (goes to the event log)"),
                 "mode": Param("restart", enum=list(RESTART_MODES)),
                 "backup_id": Param(None, type=["null", "string"], description="for restore_backup"),
                 "reset_from": Param(None, type=["null", "string"], description="for reset"),
             }, **common) as restart_dag:

        @task.branch(task_id="route")
        def route_restart() -> str:
            return "restart" if get_current_context()["params"]["mode"] == "restart" else "plan"

        @task(task_id="plan")
        def restart_plan() -> dict:
            p = get_current_context()["params"]
            return checkpoint_plan(name, RESTART_MODES[p["mode"]], backup_id=p.get("backup_id"),
                                   reset_from=p.get("reset_from"), actor=_actor(), reason=p.get("reason"))

        # Runs straight after `route`, or after an approval (a rejection skips it, and the deploy).
        restart = StreamRestartOperator(
            task_id="restart", pipeline=name, reason="{{ params.reason }}", mode="{{ params.mode }}",
            backup_id="{{ params.backup_id }}", reset_from="{{ params.reset_from }}",
            approval_task_id="approve", trigger_rule="none_failed_min_one_success")
        routed, planned = route_restart(), restart_plan()
        routed >> [planned, restart]
        planned >> PlanApprovalOperator(task_id="approve", pipeline=name,
                                        event_action="restart {{ params.mode }}") >> restart
        restart >> TriggerDagRunOperator(task_id="deploy", trigger_dag_id=f"{name}_stream",
                                         wait_for_completion=False)
    dags[restart_dag.dag_id] = restart_dag

    # A data-interval timetable, not Airflow 3's default for "@daily" (a point in time): the run
    # at midnight covers the day that just ended, and `airflow backfill create --from-date X
    # --to-date Y` makes one run per date X..Y whose interval is that date.
    daily = CronDataIntervalTimetable("0 0 * * *", timezone="UTC")
    with DAG(f"{name}_backfill", schedule=daily, max_active_runs=2, tags=[*tags, "batch"],
             description=f"Back-fill {name}: one run per event date (its data interval), then its DQ",
             params={"date": Param(None, type=["null", "string"], format="date",
                                   description="event date when triggered by hand (default: the day "
                                               "of the run's data interval, yesterday for a manual run)")},
             **common) as backfill_dag:
        @task(task_id="backfill", inlets=backfill_inlets(name), outlets=backfill_outlets(name))
        def backfill_day() -> str:
            context = get_current_context()
            day = context["params"].get("date") or _run_date(context)
            started = dt.datetime.now(dt.UTC)
            backfill_date(name, day, actor=_actor())
            annotate_backfill_events(context["outlet_events"], name, day, day, started)
            return day

        @task(task_id="dq", on_failure_callback=alert_on_failure)
        def dq_of_day(day: str) -> dict:
            return dq_check(name, day, day)

        dq_of_day(backfill_day())
    dags[backfill_dag.dag_id] = backfill_dag

    with DAG(f"{name}_dq", schedule="@hourly", max_active_runs=1, tags=[*tags, "quality"],
             description=f"Expectations of {name} over its recent partitions", **common) as dq_dag:
        @task(task_id="dq", on_failure_callback=alert_on_failure)
        def dq_recent() -> dict:
            context = get_current_context()
            first, last = recent_dates(context.get("data_interval_end") or context.get("logical_date"))
            return dq_check(name, first, last)

        dq_recent()
    dags[dq_dag.dag_id] = dq_dag

    # Destructive actions show their dry-run plan and wait for a person's approval (which replaces
    # the old `confirm` Param); the others, and dry runs, run at once.
    with DAG(f"{name}_checkpoint", schedule=None, max_active_runs=1, tags=[*tags, "on-call"],
             description=f"Checkpoint actions on {name} (inspect, backup, restore, reset, ...); "
                         "destructive ones after an approval of their plan",
             params={
                 "action": Param("inspect", enum=list(CHECKPOINT_ACTIONS)),
                 "backup_id": Param(None, type=["null", "string"]),
                 "reset_from": Param(None, type=["null", "string"]),
                 "keep": Param(None, type=["null", "integer"], minimum=1),
                 "dry_run": Param(False, type="boolean"),
                 "reason": Param(None, type=["null", "string"]),
             }, **common) as checkpoint_dag:

        @task.branch(task_id="route")
        def route() -> str:
            p = get_current_context()["params"]
            return "plan" if _needs_approval(p) else "checkpoint"

        @task(task_id="plan")
        def plan() -> dict:
            p = get_current_context()["params"]
            return checkpoint_plan(name, p["action"], backup_id=p.get("backup_id"),
                                   reset_from=p.get("reset_from"), keep=p.get("keep"), actor=_actor(),
                                   reason=p.get("reason"))

        # Runs straight after `route`, or after an approval (a rejection skips it).
        @task(task_id="checkpoint", trigger_rule="none_failed_min_one_success")
        def checkpoint() -> dict:
            context = get_current_context()
            p = context["params"]
            args = {"backup_id": p.get("backup_id"), "reset_from": p.get("reset_from"),
                    "keep": p.get("keep"), "actor": _actor(), "reason": p.get("reason")}
            if _needs_approval(p):
                return approved_checkpoint_action(name, p["action"],
                                                  context["ti"].xcom_pull(task_ids="approve"), **args)
            return checkpoint_action(name, p["action"], dry_run=bool(p.get("dry_run")), **args)

        routed, planned, run_it = route(), plan(), checkpoint()
        approve = PlanApprovalOperator(task_id="approve", pipeline=name,
                                       event_action="checkpoint {{ params.action }}")
        routed >> [planned, run_it]
        planned >> approve >> run_it
    dags[checkpoint_dag.dag_id] = checkpoint_dag

    with DAG(f"{name}_refresh", schedule=None, max_active_runs=1, tags=[*tags, "on-call"],
             description=f"Full refresh of {name} (weir refresh): plan, approval, then backup, "
                         "checkpoint reset and tables rebuilt",
             params={
                 "origin": Param("bronze", enum=["bronze", "source"],
                                 description="bronze: re-derive silver, quarantine, gold from bronze; "
                                             "source: re-read bronze from the source too"),
                 "reason": Param(type="string", minLength=3, description="why (goes to the event log)"),
             }, **common) as refresh_dag:

        @task(task_id="plan")
        def refresh_plan() -> dict:
            p = get_current_context()["params"]
            return plan_of(name, p["origin"], actor=_actor(), reason=p.get("reason"))

        @task(task_id="refresh")
        def refresh() -> dict:
            context = get_current_context()
            p = context["params"]
            return approved_refresh(name, p["origin"], context["ti"].xcom_pull(task_ids="approve"),
                                    actor=_actor(), reason=p.get("reason"))

        refresh_plan() >> PlanApprovalOperator(task_id="approve", pipeline=name,
                                               event_action="refresh") >> refresh()
    dags[refresh_dag.dag_id] = refresh_dag

    with DAG(f"{name}_checkpoint_backup", schedule="@hourly", max_active_runs=1,
             tags=[*tags, "checkpoint"],
             description=f"Hourly checkpoint backup of {name}, keeping the newest {BACKUPS_KEPT}",
             **common) as backup_dag:
        @task(task_id="backup")
        def backup() -> dict:
            return checkpoint_action(name, "backup", actor="airflow", reason="periodic backup")

        @task(task_id="prune")
        def prune() -> dict:
            return checkpoint_action(name, "prune", keep=BACKUPS_KEPT, confirm=True, actor="airflow",
                                     reason="periodic backup retention")

        backup() >> prune()
    dags[backup_dag.dag_id] = backup_dag

    # hourly: at the default 5 s trigger each table gains 720 files an hour, and a write lists its
    # table's files (`infra/jvm/weir/LiveFiles.java`, bounded) before each batch
    with DAG(f"{name}_maintenance", schedule="@hourly", max_active_runs=1, tags=[*tags, "maintenance"],
             description=f"compaction and VACUUM (safe retention) of every table {name} writes",
             **common) as maintenance_dag:
        @task(task_id="compact_vacuum")
        def compact_vacuum() -> None:
            maintain(name, actor=_actor())

        compact_vacuum()
    dags[maintenance_dag.dag_id] = maintenance_dag
    return dags


def _needs_approval(params: Any) -> bool:
    """A destructive checkpoint action that is not a dry run waits for an approval of its plan."""

    return params["action"] in DESTRUCTIVE and not params.get("dry_run")


def _run_date(context: Any) -> str:
    """The event date a back-fill run reconciles: the day its data interval starts (the scheduled
    midnight run: the day that ended; a `backfill create` run: its date; a manual run: the last
    complete day). Without an interval, yesterday (UTC)."""
    start = context.get("data_interval_start")
    if start is not None:
        return start.astimezone(dt.UTC).date().isoformat()
    return (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()
