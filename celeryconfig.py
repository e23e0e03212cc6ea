"""Celery settings only. Values that vary by deployment come from awooop.config.

Celery imports this module the first time it needs its configuration (``awooop.tasks.app``
hands it over with the lazy ``config_from_object``), so only the broker URL is required here;
a worker or beat checks the rest when it starts.

PostgreSQL is the source of truth: a message is a nudge carrying a run id, so results are
ignored, delivery is at-least-once (acks late, re-queued when a worker process dies), and
each worker process takes one message at a time.
"""

import sys

from kombu import Queue

from awooop import redis_client
from awooop.config import ConfigError, Settings
from awooop.tasks import redis_transport

try:
    _settings = Settings.from_env(required=("broker_url",))
except ConfigError as exc:
    # Only a celery command reads this module: one line naming the variable, no traceback.
    print(f"awooop: configuration error: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None

broker_url = _settings.broker_url
broker_connection_retry_on_startup = True
broker_transport_options: dict[str, object] = {}
if _settings.broker_sentinel_master:
    # A sentinel:// broker URL: the group its sentinels monitor (required with one).
    broker_transport_options["master_name"] = _settings.broker_sentinel_master
if redis_client.is_redis_url(broker_url):
    redis_transport.install()  # a worker survives losing Redis while it holds a message
    # No acknowledgement emulation: kombu would keep a copy in Redis of each message a worker
    # takes until it is acked (a transaction when it takes it, one when it acks, in the
    # worker's parent, serial with every run) to deliver it again an hour later if the worker
    # vanished. PostgreSQL holds every run: the reaper hands a dead worker's runs on and the
    # orphan sweep re-sends a message that was lost, within minutes. A message is still put
    # back on its queue, from the parent's memory, when the process running it dies
    # (task_reject_on_worker_lost) and when the worker stops before running it.
    broker_transport_options["ack_emulation"] = False

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
task_ignore_result = True
result_backend = None

task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
worker_send_task_events = bool(_settings.task_events)
# Flower gets received/started/succeeded events from the workers; "sent" events would cost
# a second Redis publish per run on the admission path.
task_send_sent_event = False
worker_hijack_root_logger = False
worker_redirect_stdouts = False

# A worker's remote-control (pidbox) queue is not exclusive: after a partition RabbitMQ keeps
# the dead connection until its heartbeat timeout, and a worker reconnecting meanwhile must be
# able to declare its queue again (an exclusive one fails with 405 RESOURCE_LOCKED, which
# stops the worker). It is still auto-deleted once unused (control_queue_expires).
control_queue_exclusive = False
# A lost broker connection does not cancel the runs a worker is executing: PostgreSQL is the
# truth and a run completes without the broker; the unacked message is redelivered and its
# claim is a no-op (Celery 6 changes this default).
worker_cancel_long_running_tasks_on_connection_loss = False

task_default_queue = "runs"
task_queues = (
    Queue("runs"),
    Queue("notifications"),
    Queue("maintenance"),
)
task_routes = {
    "awooop.runs.*": {"queue": "runs"},
    "awooop.notifications.*": {"queue": "notifications"},
    "awooop.sweeps.*": {"queue": "maintenance"},
}

beat_schedule_filename = _settings.beat_schedule_file
# Celery's PersistentScheduler, refusing a schedule file's missing directory in one line.
beat_scheduler = "awooop.tasks.app:Scheduler"
beat_schedule = {
    "reap-stale-runs": {
        "task": "awooop.sweeps.reap",
        "schedule": _settings.reaper_interval_seconds,
        # A pass that could not start before the next one is due is dropped, not stacked.
        "options": {"expires": _settings.reaper_interval_seconds},
    },
    "watch-workers": {
        "task": "awooop.sweeps.watch_workers",
        "schedule": _settings.worker_watch_interval_seconds,
        "options": {"expires": _settings.worker_watch_interval_seconds},
    },
    "resend-orphaned-runs": {
        "task": "awooop.sweeps.resend_orphans",
        "schedule": _settings.orphan_interval_seconds,
        "options": {"expires": _settings.orphan_interval_seconds},
    },
    "fire-due-timers": {
        "task": "awooop.sweeps.fire_due_timers",
        "schedule": _settings.timer_interval_seconds,
        "options": {"expires": _settings.timer_interval_seconds},
    },
    "start-scheduled-workflows": {
        "task": "awooop.sweeps.start_scheduled",
        "schedule": _settings.schedule_interval_seconds,
        "options": {"expires": _settings.schedule_interval_seconds},
    },
    "send-due-notifications": {
        "task": "awooop.sweeps.send_due_notifications",
        "schedule": _settings.outbox_interval_seconds,
        "options": {"expires": _settings.outbox_interval_seconds},
    },
    "prune-dedupe": {
        "task": "awooop.sweeps.prune_dedupe",
        "schedule": _settings.prune_interval_seconds,
        "options": {"expires": _settings.prune_interval_seconds},
    },
    "retention": {
        "task": "awooop.sweeps.retention",
        "schedule": _settings.retention_interval_seconds,
        "options": {"expires": _settings.retention_interval_seconds},
    },
}
