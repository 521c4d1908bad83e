"""Periodic jobs: work a server does beside its calls, again and again, until it stops.

The contract of a ``PeriodicJob(name, run, Schedule(...))``:

- **When it runs.** ``start`` runs ``run`` at once (or after one interval, ``first_run_at_start=False``),
  then waits ``interval`` plus a random part of up to ``jitter`` seconds *after each run ends*, and
  runs again. Runs never overlap within a job; a slow run delays the next one, it never doubles it.
- **Stop.** ``stop`` returns promptly: a wait ends at once, a run in flight is cancelled at its next
  ``await`` (work it handed to a thread ends on its own: a batch commits or rolls back). The loop's
  task is awaited, so nothing is left running or unobserved, and no run starts after ``stop``.
- **Failures.** A run that raises is logged and the next one comes at the next interval; the loop
  never ends on an error. A transient failure (``Unavailable`` by default: the database cannot answer,
  is away or failing over) is an expected, passing state: one WARNING with its reason when it starts,
  one INFO line with the count of failed runs when a run succeeds again, nothing in between. Any
  other exception is a defect and is logged at ERROR with its traceback, every time.
- **One runner at a time, when asked.** With an ``exclusion`` (``single_runner(engine, name)``), a
  run first tries to hold the job's lock, named by the job: a PostgreSQL session advisory lock
  (replicas of a service on one database), or on SQLite an advisory file lock beside the database
  file (the worker processes of one host). A run that finds it held elsewhere is skipped (outcome
  ``skipped``) and tried again at the next interval; the lock is released when the run ends or is
  cancelled, and by the database when the holder's connection or process dies. The lock spares
  replicas doing the same work twice; a job whose correctness needs exclusion still takes its own
  lock in the transaction that writes (the audit sequencer does), because a run cancelled at stop
  may leave a thread finishing its batch after the lock is released.
- **Metrics.** With ``PeriodicMetrics`` on the service's registry, every run sets
  ``decisionflow_periodic_last_run_started_timestamp_seconds``, ``..._finished_timestamp_seconds`` and
  ``decisionflow_periodic_last_run_duration_seconds``, and counts ``decisionflow_periodic_runs_total``
  by ``outcome`` (``succeeded``, ``unavailable``, ``failed``, ``skipped``); each series carries the
  job's name as ``periodic_job`` (``job`` is Prometheus's own target label).
- **Time.** The clock (timestamps), the monotonic clock (durations), the sleep and the jitter's random
  source are parameters, so tests run the real loop without waiting.

The jobs: the receiver's key pruning (``prune-keys``, effect_receiver.housekeeping), the orchestrator's
audit sequencer (``audit-sequencer``, orchestrator.audit.sequencer) and review timer (``review-timer``,
orchestrator.review_timer, the one job with an exclusion), and the connection guard's sweep
(``connection-sweep``, decisionflow_server.runtime.connection_guard).
"""

from decisionflow_server.runtime.periodic._exclusion import Exclusion, Held, single_runner
from decisionflow_server.runtime.periodic._metrics import OUTCOMES, Outcome, PeriodicMetrics
from decisionflow_server.runtime.periodic._runner import PeriodicJob, Schedule, Wording

__all__ = [
    "OUTCOMES",
    "Exclusion",
    "Held",
    "Outcome",
    "PeriodicJob",
    "PeriodicMetrics",
    "Schedule",
    "Wording",
    "single_runner",
]
