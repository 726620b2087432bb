"""Approval before a destructive action (restore, rewind, reset, prune, refresh): the approver sees
the action's dry-run plan (what the `plan` task returned, as Markdown) in Airflow's Required
Actions, and answers Approve or Reject with a reason, through Airflow's human-in-the-loop
`ApprovalOperator`. A rejection skips the action; a timeout fails the approval for good (no
second wait), so the action never runs: either way nothing changes, and the event log says who
decided (or that nobody did).

The approval is retried once, because Airflow 3.3 can fail it after a person answered: an answer
given while the worker of the parked try is still exiting resumes the task, and the executor's late
"success" of that worker then reads as a state mismatch and fails the resumed try (the
apache/airflow#71580 / #72716 family; `infra/airflow/airflow.env` shortens that window to about a
second). The retry asks again, in Required Actions, instead of failing the run.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException

from spark_jobs.control import eventlog

log = logging.getLogger(__name__)
RESPONSE_TIMEOUT = dt.timedelta(hours=12)
# One more try, soon, if Airflow fails the approval itself (see above); never after a timeout.
RETRIES = 1
RETRY_DELAY = dt.timedelta(seconds=5)
PLAN_TASK = "plan"


def approval_of(payload: dict[str, Any] | None) -> dict[str, Any]:
    """The event-log form of an approval task's result: decision, who, why, when."""
    payload = payload or {}
    user = payload.get("responded_by_user") or {}
    at = payload.get("responded_at")
    return {"decision": (payload.get("chosen_options") or [None])[0],
            "by": user.get("name") or user.get("id"),
            "reason": (payload.get("params_input") or {}).get("reason") or None,
            "at": at.isoformat() if isinstance(at, dt.datetime) else at}


class PlanApprovalOperator(ApprovalOperator):
    """Wait for a person to approve `event_action` on `pipeline`, showing the plan task's Markdown;
    record a rejection or a timeout in the event log (an approval is recorded by the action)."""

    template_fields: Sequence[str] = (*ApprovalOperator.template_fields, "event_action")

    def __init__(self, *, pipeline: str, event_action: str, plan_task_id: str = PLAN_TASK,
                 response_timeout: dt.timedelta = RESPONSE_TIMEOUT, **kwargs: Any) -> None:
        # The DAG hands its own Params down too: the approver's form asks for a reason only.
        kwargs.pop("params", None)
        kwargs.update(retries=RETRIES, retry_delay=RETRY_DELAY)   # over the DAG's default_args
        params = {"reason": Param("", type="string", description="why you approve or reject it")}
        super().__init__(
            subject=f"Approve {event_action} of {pipeline}?",
            body=f"{{{{ ti.xcom_pull(task_ids='{plan_task_id}')['text'] }}}}",
            params=params, response_timeout=response_timeout, **kwargs)
        self.pipeline = pipeline
        self.event_action = event_action

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if "error" in event:
            outcome = "timed out" if event.get("error_type") == "timeout" else "approval failed"
            self._record(outcome, "airflow", str(event.get("error"))[:500],
                         {"approval": {"decision": None, "error": event.get("error")}})
            try:
                return super().execute_complete(context, event)
            except Exception as error:        # fails for good: a retry would wait all over again
                raise AirflowFailException(f"{self.event_action} of {self.pipeline}: {outcome}") from error
        approval = approval_of(event)
        if approval["decision"] != self.APPROVE:
            # Recorded first: a rejection ends the operator by raising the skip of the action.
            self._record("rejected", approval["by"] or "airflow", approval["reason"],
                         {"approval": approval})
        return super().execute_complete(context, event)

    def _record(self, outcome: str, actor: str, reason: str | None, details: dict[str, Any]) -> None:
        eventlog.record(self.pipeline, self.event_action, outcome, actor=actor, reason=reason,
                        details=details)
        log.info("%s %s: %s by %s", self.pipeline, self.event_action, outcome, actor)
