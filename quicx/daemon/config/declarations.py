"""
The settings table: every setting of C{quicx.conf} once, by section, with its syntax, help and flag.

Each C{[section]} below is declared with L{section}: the record its values
live in (L{quicx.daemon.config.sections}; its defaults are the settings'),
then one L{key} per setting, in the order of the docs' tables: the key, its
kind (L{quicx.daemon.config.kinds}), a line of help, and where they differ
from the rule, its name, field, flag and what its default means.  From
L{SETTINGS} come the file's parser and its errors, the C{twistd quicx} and
C{quicx start} flags (C{--FLAG}, one per setting), C{quicx init}'s file and
the table in C{docs/configuration.md} (checked by C{tests/test_docs.py}).
L{QUEUE_KEYS} and L{SCHEDULE_KEYS} are the keys of the C{[queue NAME]} and
C{[schedule NAME]} sections.
"""

from __future__ import annotations

from quicx.daemon.config.kinds import (
    ADDRESSES,
    BACKOFF,
    BUSY_POLL,
    CRON,
    HOST_PORT,
    KEY_PREFIX,
    MEMBER_NAME,
    NAMES,
    PAYLOAD,
    PORT,
    QUEUE_NAME,
    SIZE_CLASS,
    SIZE_OR_SHARE,
    TASK_TYPE,
    TIME_ZONE,
    URLS,
    VERSIONS,
    YES_NO,
    choice,
    integer,
    number,
    seconds,
    text,
)
from quicx.daemon.config.sections import (
    AllocatorSettings,
    AutoscaleSettings,
    ClusterSettings,
    DeadLetterSettings,
    JournalSettings,
    Limits,
    LogSettings,
    MetricsSettings,
    ProtocolSettings,
    QueuesSettings,
    ReplicationMode,
    ReplicationSettings,
    RetrySettings,
    ScheduleSettings,
    ServerSettings,
    StandbyLost,
    TaskSettings,
    WebSettings,
)
from quicx.daemon.config.table import SectionKey, key, repeated_set, repeated_tuple, section
from quicx.daemon.journal.records import MAX_SHARED_DATA, FsyncPolicy
from quicx.daemon.observe.events import Compression, EventSettings
from quicx.daemon.observe.logformat import LogFormat
from quicx.daemon.observe.task_history import MAX_COUNT
from quicx.daemon.queue import pmad
from quicx.daemon.queue.bulk import BulkSettings
from quicx.daemon.queue.checkpoints import CheckpointSettings
from quicx.daemon.queue.dispatch import Order
from quicx.daemon.queue.groups import GroupLimits
from quicx.daemon.queue.policy import (
    DependencyLimits,
    ProgressSettings,
    QueuePolicy,
    SharedLimits,
)
from quicx.daemon.queue.results import ResultLimits
from quicx.daemon.queue.schedules import MAX_CATCH_UP, ScheduleSpec
from quicx.net.tls import TlsSettings
from quicx.protocol.admin import Missed
from quicx.protocol.checkpoints import MAX_CHECKPOINT
from quicx.protocol.codec import MAX_CREDITS, MAX_TYPE_LENGTH
from quicx.protocol.parents import MAX_CONTEXT, MAX_PARENTS
from quicx.protocol.replication import MAX_MAX_BATCH, MIN_MAX_BATCH
from quicx.protocol.workers import MAX_ANNOUNCED_TYPES

SERVER = section("server", ServerSettings, "",
    key("port", PORT, "The TCP port, on 127.0.0.1 only; `listen` replaces it."),
    key("listen", text("ENDPOINT"),
        "Listen on this endpoint string, e.g. tcp:16381 (replaces port).",
        unset="`tcp:PORT:interface=127.0.0.1`", collect=repeated_tuple),
    key("heartbeat_interval", seconds(), "Seconds of silence before a HEARTBEAT (0: off)."),
    key("heartbeat_timeout", seconds(),
        "Seconds of silence before a peer is dropped (more than the interval)."),
    key("control", text("PATH"),
        "Control socket path for `quicx status` ('none': off).",
        unset="`$XDG_RUNTIME_DIR/quicx-PORT.sock`, or under `/tmp`"),
    key("pid_file", text("PATH"),
        "Where `quicx start` records its pid (under twistd: twistd's --pidfile).",
        unset="`$XDG_RUNTIME_DIR/quicx-PORT.pid`, or under `/tmp`"),
    key("drain_timeout", seconds(),
        "On stop, wait this long for queued and running tasks to finish (0: don't)."),
    key("spare_busy_workers", YES_NO, "yes: never drop a silent worker that holds a task."),
    key("busy_poll", BUSY_POLL, "Poll sockets this many seconds before sleeping (0: off)."),
)  # fmt: skip

ALLOCATOR = section("allocator", AllocatorSettings, "",
    key("pool_size", integer(size=True), "PMAD pool size in bytes (suffixes K, M, G)."),
    key("class", SIZE_CLASS,
        "A size class: block payload size, percent of the pool.",
        name="classes", field="classes", flag="class", unset="the built-in layout (below)",
        collect=repeated_tuple),
)  # fmt: skip

TASKS = section("tasks", TaskSettings, "",
    key("allow", TASK_TYPE,
        "Accept SUBMITs of this task type only.",
        name="allowed_types", field="allowed_types", flag="allow", unset="any type",
        collect=repeated_set),
    key("timeout", seconds(),
        "Requeue a task a worker holds longer than this many seconds (0: never).",
        name="task_timeout"),
    key("max_attempts", integer(0, 1_000_000),
        "Deliveries a task gets before it fails as given up (0: no limit)."),
    key("max_delay", seconds(), "The furthest ahead a SUBMIT may delay its task, in seconds."),
    key("max_delayed", integer(0, 1_000_000_000),
        "Delayed tasks at most (SUBMITs past it are refused; retries always wait)."),
    key("max_lease", seconds(), "The longest one TOUCH may extend a task's lease, in seconds."),
)  # fmt: skip

LIMITS = section("limits", Limits, "",
    key("max_connections", integer(1, 1_000_000), "Connections past this are refused."),
    key("first_frame_timeout", seconds(),
        "Seconds a new connection has to send a whole frame (0: off)."),
    key("monitor_slice", seconds(high=1.0, low=0.0001),
        "Seconds of the event loop one connection's monitor queries (INSPECT, PEEK, QUEUES, "
        "...) may hold in a turn before the rest wait for the next."),
    key("read_slice", integer(4096, 1 << 30, size=True),
        "Bytes of one connection's input handled in one turn of the event loop; the rest of "
        "what was read waits for the next turn, so other connections are served in between."),
    key("max_type_length", integer(1, MAX_TYPE_LENGTH, size=True),
        "The longest task type a SUBMIT may name, in bytes."),
    key("max_reason_length", integer(1, 1 << 20, size=True),
        "The longest FAILED reason, in bytes."),
    key("max_output_buffer", integer(4096, 1 << 30, size=True),
        "Unsent bytes a connection may pile up before the daemon stops reading it."),
    key("max_credits", integer(1, MAX_CREDITS),
        "The most tasks one worker connection may hold at once."),
    key("max_worker_types", integer(1, MAX_ANNOUNCED_TYPES),
        "The most task types one worker's ANNOUNCE may name."),
    key("terminate_grace", seconds(high=3600.0),
        "Seconds a terminated worker has to close its connection before the daemon does."),
)  # fmt: skip

TLS = section("tls", TlsSettings, "tls_",
    key("certificate", text("FILE"),
        "The daemon's certificate chain (PEM), for tls: listeners.",
        unset="none"),
    key("private_key", text("FILE"), "Its private key (PEM).", unset="the certificate file"),
    key("client_ca", text("FILE"),
        "CA certificates (PEM) that tls: clients' certificates must be signed by.",
        unset="none"),
    key("producers", NAMES,
        "Certificate common names that may SUBMIT (needs client_ca).",
        field="authorization.producers", unset="any"),
    key("workers", NAMES,
        "Certificate common names that may send READY (needs client_ca).",
        field="authorization.workers", unset="any"),
    key("monitors", NAMES,
        "Certificate common names that may ask STATS (needs client_ca).",
        field="authorization.monitors", unset="any"),
    key("admins", NAMES,
        "Certificate common names that may pause, resume, purge and cancel any task.",
        field="authorization.admins", unset="none (the control socket only)"),
)  # fmt: skip

PROTOCOL = section("protocol", ProtocolSettings, "",
    key("versions", VERSIONS,
        "The protocol versions accepted (1: exactly the protocol page's daemon).",
        name="protocol_versions"),
    key("default_queue", QUEUE_NAME,
        "Where a SUBMIT without a queue goes, and what version-1 workers serve."),
)  # fmt: skip

QUEUES = section("queues", QueuesSettings, "",
    key("max_queues", integer(1, 1_000_000), "The most queues that may exist at once."),
    key("max_depth", integer(),
        "Queued tasks a queue without a [queue NAME] max_depth may hold (0: pool only).",
        name="default_max_depth", flag="max-depth"),
    key("priority", integer(0, 255),
        "The priority of a task that names none, in a queue without its own.",
        name="default_priority"),
    key("max_key_length", integer(1, 255), "The longest idempotency or fairness key, in bytes."),
    key("dedup_window", seconds(),
        "Seconds an idempotency key is remembered after its task was submitted."),
    key("max_dedup_keys", integer(0, 100_000_000),
        "Keys of finished tasks remembered at most (the oldest go first)."),
    key("max_fairness_keys", integer(1, 100_000_000),
        "Fairness keys with limit state, across all queues."),
    key("dispatch", choice(Order),
        "Which idle worker gets the next task: the one idle last, or the one idle longest.",
        field="dispatch.order"),
    key("failing_streak", integer(0, 1_000_000),
        "lifo: failures in a row after which a worker gets tasks only when no other is idle"
        " (0: off).",
        field="dispatch.failing_streak"),
    key("failing_window", seconds(),
        "lifo: seconds after its latest failure that such a worker stays behind (0: off).",
        field="dispatch.failing_window"),
    key("aging", seconds(),
        "The starvation bound W: a lower priority's next task waiting this long goes first"
        " (0: strict priority order), in a queue without its own.",
        name="default_aging"),
)  # fmt: skip

RETRIES = section("retries", RetrySettings, "",
    key("retries", integer(0, 65535),
        "How many times a failed task is retried, in a queue without its own.",
        name="default_retries"),
    key("backoff", BACKOFF,
        "The wait before each retry, in a queue without its own.",
        name="default_backoff"),
    key("count_lost", YES_NO,
        "yes: a task taken back from a lost or too-slow worker counts as a failure."),
)  # fmt: skip

DEAD_LETTERS = section("dead_letters", DeadLetterSettings, "dead_",
    key("max_count", integer(0, 100_000_000),
        "Dead tasks kept at most, across all queues (the oldest go first; 0: none)."),
    key("max_age", seconds(), "Seconds a dead task is kept (0: until pushed out by max_count)."),
)  # fmt: skip

SCHEDULES = section("schedules", ScheduleSettings, "",
    key("max_schedules", integer(0, 100_000),
        "The most schedules: the [schedule NAME] sections and those added at run time."),
)  # fmt: skip

PROGRESS = section("progress", ProgressSettings, "",
    key("interval", seconds(high=60),
        "Seconds between two progress reports of one task that go out (0: each goes out).",
        name="progress_interval"),
    key("max_message", integer(0, 65535, size=True),
        "The longest PROGRESS message, in bytes.",
        name="max_progress_message"),
)  # fmt: skip

CHECKPOINTS = section("checkpoints", CheckpointSettings, "checkpoint_",
    key("max_size", integer(1, MAX_CHECKPOINT, size=True),
        "The largest state one CHECKPOINT may carry, in bytes (larger: refused from its header)."),
    key("max_memory", integer(0, 1 << 32, size=True),
        "The most bytes all running tasks' checkpoints may hold together (past it: refused)."),
)  # fmt: skip

SHARED = section("shared", SharedLimits, "shared_",
    key("max_size", integer(0, MAX_SHARED_DATA, size=True),
        "The most data one version of a shared name may have, in bytes."),
    key("max_names", integer(1, 100_000),
        "The most shared names at once (and names one connection may follow)."),
    key("max_memory", integer(0, 1 << 32, size=True),
        "The most data all shared names may hold together, in bytes."),
)  # fmt: skip

RESULTS = section("results", ResultLimits, "",
    key("max_size", integer(0, pmad.MAX_CLASS_SIZE, size=True),
        "The longest result an ACK may carry, in bytes (and at most the largest class).",
        name="result_max_size"),
    key("ttl", seconds(low=1),
        "Seconds an outcome is kept when its SUBMIT or queue names no time.",
        name="result_ttl"),
    key("max_ttl", seconds(low=1),
        "The longest an outcome is kept, in seconds.",
        name="result_max_ttl"),
    key("max_count", integer(0, 100_000_000),
        "Outcomes kept at most (the oldest are evicted first).",
        name="result_max_count"),
    key("max_memory", SIZE_OR_SHARE,
        "Pool memory kept outcomes may take: a size, or a share of pool_size.",
        name="result_max_memory"),
    key("max_waiters", integer(0, 100_000_000), "AWAITs and group WAITs waiting at once, in all."),
    key("max_waiters_per_connection", integer(0, 100_000_000),
        "AWAITs and group WAITs waiting at once on one connection."),
    key("max_wait", seconds(),
        "The longest one AWAIT or group WAIT waits, in seconds (longer is cut to it)."),
)  # fmt: skip

GROUPS = section("groups", GroupLimits, "",
    key("max_groups", integer(1, 100_000_000),
        "Groups at most, open or finished (the oldest finished are forgotten first)."),
    key("ttl", seconds(), "Seconds a finished group is remembered.", name="group_ttl"),
    key("idle_close", seconds(),
        "Seconds an open group may go without a new member before the daemon closes it"
        " (0: never).",
        name="group_idle_close"),
)  # fmt: skip

DEPENDENCIES = section("dependencies", DependencyLimits, "",
    key("max_parents", integer(1, MAX_PARENTS),
        f"The most parents one SUBMIT may name (`after`; at most {MAX_PARENTS})."),
    key("max_waiting", integer(1, 100_000_000),
        "Tasks waiting for their parents or their group at once; one more is refused (0x01)."),
    key("max_results", integer(0, MAX_CONTEXT, size=True),
        "Bytes of its parents' results a waiting task is handed (past it, without their data)."),
)  # fmt: skip

EVENTS = section("events", EventSettings, "events_",
    key("directory", text("DIR"),
        "Write task lifecycle events (NDJSON) into this directory.",
        flag="events", unset="none"),
    key("max_bytes", integer(4096, 1 << 40, size=True),
        "Start a new events file past this size."),
    key("max_age", seconds(), "...or past this many seconds."),
    key("compress", choice(Compression),
        "Compress each events file once a newer one starts (in a thread of its own)."),
    key("max_subscribers", integer(0, 10_000),
        "Connections that may watch live events at once (WATCH; 0: none).",
        field="subscribers.max_subscribers"),
    key("max_held", integer(0, 10_000_000),
        "Events held for one subscriber that reads too slowly; older ones are dropped.",
        field="subscribers.max_held"),
)  # fmt: skip

METRICS = section("metrics", MetricsSettings, "metrics_",
    key("listen", text("ENDPOINT"),
        "Serve Prometheus metrics at /metrics on this endpoint (tcp:9464:interface=127.0.0.1).",
        unset="none"),
    key("max_types", integer(1, 100_000),
        "Task types with labels of their own; later types count as `other`."),
    key("max_series", integer(1, 1_000_000),
        "(queue, type) pairs with labels of their own; later pairs count as queue `other`."),
    key("max_scrapes", integer(1, 1000),
        "Scrapes answered at once, until each scraper has read its text; one more gets 503."),
    key("max_connections", integer(1, 100_000),
        "Connections to /metrics at once; one more is answered 503 and closed."),
)  # fmt: skip

AUTOSCALE = section("autoscale", AutoscaleSettings, "autoscale_",
    key("target", seconds(high=86_400),
        "Publish each queue's workers needed to keep its p95 queue wait at most this (0: off)."),
    key("window", seconds(high=3600, low=1),
        "Seconds of recent arrivals and run times each queue's estimate replays."),
    key("interval", seconds(high=3600, low=0.1),
        "Seconds between two estimates of every queue."),
    key("max_workers", integer(1, 100_000),
        "The most workers an estimate considers (what it says when even they miss the target)."),
    key("max_jobs", integer(10, 100_000),
        "Arrivals (and run times) a queue's window keeps: bounds the memory and each"
        " estimate's replay."),
    key("min_workers", integer(0, 100_000),
        "The least an estimate says, however idle its queue."),
)  # fmt: skip

WEB = section("web", WebSettings, "web_",
    key("listen", text("ENDPOINT"),
        "Serve the web dashboard on this endpoint (e.g. tcp:8080:interface=127.0.0.1).",
        unset="none"),
    key("admin_token", text(),
        "A bearer token that gives the dashboard's admin role (every action).",
        unset="none"),
    key("monitor_token", text(),
        "A bearer token that gives the dashboard's monitor role (read only).",
        unset="none"),
    key("history", seconds(),
        "Seconds of per-second figures the dashboard's charts keep (in memory)."),
    key("max_streams", integer(1, 10_000),
        "Live dashboard streams (open pages) at once; one more is refused (503)."),
    key("max_connections", integer(1, 100_000),
        "Connections to the dashboard at once; one more is answered 503 and closed."),
    key("task_history", integer(0, MAX_COUNT),
        "Finished tasks the dashboard's history keeps (in memory; 0: none), the newest."),
    key("task_history_age", seconds(low=1),
        "Seconds a finished task stays in the dashboard's history."),
    key("task_history_bytes", integer(1 << 20, 1 << 30, size=True),
        "Bytes the dashboard's history keeps in all (the oldest go first past it)."),
    key("search_step", integer(10, MAX_COUNT),
        "Records of the dashboard's history a search reads per request (one reactor turn)."),
    key("payload_preview", integer(0, 64 << 10, size=True),
        "Bytes of each payload the dashboard's history keeps to show (0: none)."),
    key("failure_text", integer(64, 64 << 10, size=True),
        "Bytes of a failure's reason (exception and traceback) the dashboard's history keeps."),
    key("preview_done", YES_NO,
        "Keep the payload preview of tasks that succeed too (read at each delivery: a cost)."),
)  # fmt: skip

CLUSTER = section("cluster", ClusterSettings, "cluster_",
    key("peers", ADDRESSES,
        "The other daemons of a cluster, polled for the dashboard's and /metrics' cluster view.",
        unset="none"),
    key("interval", seconds(high=3600, low=0.1),
        "Seconds between two polls of every peer's status."),
    key("timeout", seconds(high=60, low=0.1),
        "Seconds a peer has to answer a poll; past it, it shows as down."),
    key("max_status", integer(64 << 10, 64 << 20, size=True),
        "The longest status document taken from a peer; a longer one shows it as down."),
)  # fmt: skip

JOURNAL = section("journal", JournalSettings, "",
    key("path", text("FILE"),
        "Keep accepted tasks in this write-ahead journal file.",
        name="journal", unset="none"),
    key("fsync", choice(FsyncPolicy), "When journal records reach the disk."),
    key("compact_factor", number(1.5, 1000),
        "Compact the journal when it is this many times what a compaction keeps..."),
    key("compact_min_size", integer(size=True), "...and at least this big."),
)  # fmt: skip

LOG = section("log", LogSettings, "log_",
    key("summary_interval", seconds(),
        "Log failed, requeued and given-up tasks, and limits hit again, in a summary this often"
        " (0: each)."),
    key("format", choice(LogFormat),
        "Log lines on stdout as text, or as one JSON object per line."),
)  # fmt: skip

BULK = section("bulk", BulkSettings, "bulk_",
    key("batch", integer(1, 1_000_000),
        "The most tasks one bulk action (quicx tasks ...) looks at in one turn of the event loop."),
    key("turn_time", seconds(high=1.0, low=0.0001),
        "The longest one bulk action's turn runs, in seconds (it ends after the task past it)."),
    key("max_running", integer(1, 1000), "Bulk actions running at once (more are refused)."),
)  # fmt: skip


REPLICATION = section("replication", ReplicationSettings, "replication_",
    key("etcd", URLS,
        "The lease store (etcd's URLs) that elects the shard's primary; none: replication off.",
        unset="none (off)"),
    key("shard", MEMBER_NAME, "The shard this daemon is one of (its key in the lease store)."),
    key("name", MEMBER_NAME, "This daemon's name in the shard, unique in it.",
        unset="the host name"),
    key("listen", text("ENDPOINT"),
        "Serve replication to the standbys on this endpoint (e.g. tcp:16400); needed with etcd.",
        unset="none"),
    key("advertise", HOST_PORT, "The HOST:PORT the shard's daemons reach that listener at.",
        unset="listen's, if it is TCP on a port of its own"),
    key("client_address", HOST_PORT,
        "The HOST:PORT clients reach this daemon at (ERROR 0x0C and HELLO name it).",
        unset="the first TCP [server] endpoint's"),
    key("lease_ttl", seconds(high=60, low=1),
        "Seconds the primary's lease lasts unrenewed; past it, it stops acknowledging."),
    key("mode", choice(ReplicationMode),
        "sync: an acknowledgement waits for every in-sync standby's copy; async: for the"
        " local one."),
    key("standby_lost", choice(StandbyLost),
        "In sync mode, an in-sync standby silent for standby_timeout: wait for it, or go on"
        " without it (async)."),
    key("standby_timeout", seconds(high=60, low=0.1),
        "Seconds an in-sync standby may leave a batch unacknowledged before standby_lost applies."),
    key("max_backlog", integer(1 << 20, 1 << 40, size=True),
        "Bytes of batches kept for a slow standby; past it, it starts over from a snapshot."),
    key("max_batch", integer(MIN_MAX_BATCH, MAX_MAX_BATCH, size=True),
        "The largest BATCH frame sent to a standby (a bigger group commit goes as several);"
        " the same on every daemon of a shard."),
    key("key_prefix", KEY_PREFIX, "Where the shards' keys live in the lease store."),
)  # fmt: skip


SETTINGS = (
    *SERVER, *ALLOCATOR, *TASKS, *LIMITS, *TLS, *PROTOCOL, *QUEUES, *RETRIES, *DEAD_LETTERS,
    *SCHEDULES, *PROGRESS, *SHARED, *RESULTS, *GROUPS, *DEPENDENCIES, *EVENTS, *METRICS,
    *AUTOSCALE, *WEB, *CLUSTER, *JOURNAL, *LOG, *CHECKPOINTS, *BULK,
    *REPLICATION,
)  # fmt: skip
"""Every setting, in the order of the docs' tables."""

SECTIONS = tuple(dict.fromkeys(s.section for s in SETTINGS))
BY_NAME = {s.name: s for s in SETTINGS}
BY_KEY = {(s.section, s.key): s for s in SETTINGS}

QUEUE_KEYS = (
    SectionKey(QueuePolicy, "max_depth", integer(),
               "Queued tasks it may hold (0: only the pool bounds it).", "`[queues] max_depth`"),
    SectionKey(QueuePolicy, "priority", integer(0, 255), "The priority of a task that names none.",
               "`[queues] priority`"),
    SectionKey(QueuePolicy, "timeout", seconds(),
               "Seconds a worker may hold one of its tasks (0: never).", "`[tasks] timeout`"),
    SectionKey(QueuePolicy, "key_concurrency", integer(),
               "Tasks of one fairness key running at once (0: any)."),
    SectionKey(QueuePolicy, "rate", number(0, 1e6),
               "Tasks per second the queue may start (0: no limit)."),
    SectionKey(QueuePolicy, "burst", integer(),
               "Tokens of the rate's bucket (0: one second's worth)."),
    SectionKey(QueuePolicy, "key_rate", number(0, 1e6),
               "Tasks per second one fairness key may start (0: any)."),
    SectionKey(QueuePolicy, "key_burst", integer(),
               "Tokens of the key rate's bucket (0: one second's worth)."),
    SectionKey(QueuePolicy, "retries", integer(0, 65535),
               "How many times a failed task is retried.", "`[retries] retries`"),
    SectionKey(QueuePolicy, "backoff", BACKOFF,
               "The wait before each retry (with its jitter).", "`[retries] backoff`"),
    SectionKey(QueuePolicy, "keep_results", YES_NO,
               "Keep every task's outcome and result, as if its SUBMIT asked."),
    SectionKey(QueuePolicy, "result_ttl", seconds(low=1),
               "Seconds the queue keeps an outcome.", "`[results] ttl`"),
    SectionKey(QueuePolicy, "aging", seconds(),
               "The starvation bound W: a lower priority's next task waiting this long goes"
               " first (0: strict priority order).", "`[queues] aging`"),
    SectionKey(QueuePolicy, "expires", seconds(),
               "Seconds a task may wait to start once due, unless its SUBMIT says (0: no limit)."),
    SectionKey(QueuePolicy, "expired_dead", YES_NO,
               "A task not started before its deadline goes to the dead-letter set."),
)  # fmt: skip
"""The keys of a C{[queue NAME]} section, in the docs' order."""

SCHEDULE_KEYS = (
    SectionKey(ScheduleSpec, "cron", CRON,
               "Fire on this cron expression, in timezone (or give every).", "none"),
    SectionKey(ScheduleSpec, "every", seconds(low=1),
               "Fire every this many seconds (or give cron).", "none"),
    SectionKey(ScheduleSpec, "timezone", TIME_ZONE, "The time zone cron is read in."),
    SectionKey(ScheduleSpec, "type", TASK_TYPE, "The task type to submit (required).",
               "none (required)", "task_type"),
    SectionKey(ScheduleSpec, "payload", PAYLOAD, "The task's payload, as UTF-8 text.", "empty"),
    SectionKey(ScheduleSpec, "queue", QUEUE_NAME, "The queue to submit into.",
               "`[protocol] default_queue`"),
    SectionKey(ScheduleSpec, "priority", integer(0, 255), "The task's priority.",
               "the queue's `priority`"),
    SectionKey(ScheduleSpec, "missed", choice(Missed),
               "Firings missed while the daemon was down: fire none, the latest, or each."),
    SectionKey(ScheduleSpec, "catch_up", integer(0, MAX_CATCH_UP),
               "With missed = all, the most missed firings fired (the latest)."),
)  # fmt: skip
"""The keys of a C{[schedule NAME]} section, in the docs' order."""

QUEUE_SECTION = "queue"
SCHEDULE_SECTION = "schedule"
NAMED_KEYS = {
    QUEUE_SECTION: {k.key: k for k in QUEUE_KEYS},
    SCHEDULE_SECTION: {k.key: k for k in SCHEDULE_KEYS},
}
"""The keys of each kind of named section (C{[queue NAME]}, C{[schedule NAME]}), by key."""
