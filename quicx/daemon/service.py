"""
The daemon's service tree, built from a checked configuration.  Its shape:

    QuicxDaemon (MultiService)
      +- TimerService        the log summary (when summary_interval > 0)
      +- EventBus            lifecycle events, to live subscribers...
      |    +- EventLog       ...and to files (when configured)
      +- Journal             the write-ahead journal (when configured)
      +- QueueService        the state
      +- TimerService...     heartbeats, the task timeout
      +- ListenerService...  one per endpoint string, the control socket, and
                             the Prometheus metrics (when configured)
      +- TimerService        the polling of [cluster] peers (when set)
      +- TimerService        the dashboard's history (when [web] listen is set)
      +- ListenerService     the web dashboard (when [web] listen is set)

On SIGTERM the daemon drains (see L{QuicxDaemon}), then the services stop
in reverse order.
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IReactorCore
from twisted.logger import Logger
from twisted.python.failure import Failure

from quicx import __version__
from quicx.daemon import config as configuration
from quicx.daemon.config.sections import JournalSettings
from quicx.daemon.control import ControlFactory
from quicx.daemon.fleet.peers import ClusterPoller, ask_status
from quicx.daemon.journal.records import JournalCorrupt, Recovery
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import Journal
from quicx.daemon.observe.autoscale import Autoscaler
from quicx.daemon.observe.eventbus import EventBus
from quicx.daemon.observe.events import EventLog, EventSettings
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.observe.status import Where, status
from quicx.daemon.observe.telemetry import Telemetry
from quicx.daemon.periodic import every
from quicx.daemon.queue import pmad
from quicx.daemon.queue.bulk import BulkActions
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.results import ResultLimits
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.daemon.queue.shared import SharedData
from quicx.daemon.replication.node import JournalSlot, Node
from quicx.daemon.server import QuicxServerFactory
from quicx.daemon.timers import Heartbeats, heartbeat_timer, task_timeout_timer
from quicx.documents.status import StatusDocument
from quicx.documents.units import format_size
from quicx.net.busypoll import enable_busy_poll
from quicx.net.framer import OutputBatcher
from quicx.net.private import listening_socket, replace_listening_socket, set_exit_signal
from quicx.net.spare import AnsweringSocket, Spare
from quicx.net.tls import TlsSettings, tls_endpoint
from quicx.net.twisted_types import MultiService, Service
from quicx.protocol import wire


class ListenerService(Service):
    """
    Listens on one endpoint string and logs the address actually bound (so
    C{tcp:0} reports its port), under C{log_id}.  A failure to listen stops
    start-up with a one-line error that names the C{setting} the endpoint
    string came from, as C{strports} services do with a traceback.
    """

    log = Logger()

    def __init__(
        self,
        reactor: IReactorCore,
        description: str,
        factory: IProtocolFactory,
        announcement: str = "listening",
        tls: TlsSettings | None = None,
        *,
        log_id: str,
        setting: str = "[server] listen",
        listening: Callable[[Any], None] | None = None,
    ) -> None:
        self.reactor = reactor
        self.description = description
        self.factory = factory
        self.announcement = announcement
        self.log_id = log_id
        self.tls = tls or TlsSettings()
        self.setting = setting
        self.listening = listening
        self.port: IListeningPort | None = None

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        outcome: list[Any] = []
        try:
            description = with_backlog(self.description)
            if description.startswith("tls:"):
                endpoint = tls_endpoint(self.reactor, description, self.tls)
            else:
                endpoint = serverFromString(self.reactor, description)
            endpoint.listen(self.factory).addBoth(outcome.append)
        except ValueError as e:
            raise SystemExit(
                f"quicx: bad listen address {self.description!r} ({self.setting}): {e}"
            ) from None
        if isinstance(outcome[0], Failure):
            raise SystemExit(
                f"quicx: cannot listen on {self.description} ({self.setting}):"
                f" {outcome[0].getErrorMessage()}"
            )
        self.port = outcome[0]
        if self.listening is not None:
            self.listening(self.port)
        # Announce once the reactor runs: by then SIGTERM is handled, so the
        # line means "ready" to whoever waits for it.
        self.reactor.callWhenRunning(self._announce)

    @property
    def address(self) -> str:
        """The address bound (C{HOST:PORT} or a socket path), or C{""}."""
        if self.port is None:
            return ""
        host: Any = self.port.getHost()  # an IPv4, IPv6 or UNIX address
        if hasattr(host, "port"):
            return f"{host.host}:{host.port}"
        name = host.name
        return name.decode() if isinstance(name, bytes) else str(name)

    def _announce(self) -> None:
        if self.port is not None:
            self.log.info(
                "{what} on {address} ({description})",
                log_id=self.log_id,
                what=self.announcement,
                address=self.address,
                description=self.description,
            )

    def stopService(self) -> Any:
        super().stopService()
        if self.port is not None:
            port, self.port = self.port, None
            return port.stopListening()
        return None


class QuicxDaemon(MultiService):
    """
    The whole daemon; logs its configuration as it starts, and drains as it
    stops: listeners close, new SUBMITs are refused, and it waits (up to
    C{drain_timeout}) until nothing is queued or running before the rest
    stops.
    """

    log = Logger()

    def __init__(
        self,
        config: configuration.Config,
        queue: QueueService,
        shared: SharedData,
        reactor: Any,
        batcher: OutputBatcher,
        events: EventBus,
        journal: Journal | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.queue = queue
        self.shared = shared
        self.events = events
        self.journal = journal
        self.reactor = reactor
        self.batcher = batcher
        self._stopping = False
        self.bulk: BulkActions | None = None
        self.control_factory: QuicxServerFactory | None = None
        self.node: Node | None = None
        self.leaving = False  # a demoted primary: it stops without its drain

    def stopService(self) -> Deferred[None]:
        return Deferred.fromCoroutine(self._stop())

    def _listeners(self) -> list[ListenerService]:
        """The task listeners (not the control socket)."""
        return [
            service
            for service in self
            if isinstance(service, ListenerService) and service.announcement == "listening"
        ]

    async def _stop(self) -> None:
        await gatherResults([maybeDeferred(listener.stopService) for listener in self._listeners()])
        queue, timeout = self.queue, self.config.server.drain_timeout
        if timeout > 0 and not self.leaving:
            # Fires at once when there is nothing to wait for.
            drained = queue.drain(timeout, self.reactor)
            if not drained.called:
                self.log.info(
                    "draining: {queued} queued and {running} running tasks, up to {timeout:g} s",
                    log_id="daemon.draining",
                    queued=queue.stats().queue_depth,
                    running=queue.tasks_running,
                    timeout=timeout,
                )
            await drained
        else:
            queue.draining = True
        if self.bulk is not None:
            self.bulk.stop()
        # Every outcome forwarded before connections close.
        self.batcher.flush()
        await MultiService.stopService(self)
        # twistd re-raises the signal it stopped on (exit status 143 for
        # SIGTERM); after a clean drain the daemon exits 0 instead.
        set_exit_signal(self.reactor, None)

    def status(self) -> dict[str, Any]:
        """Everything C{quicx status} shows (see docs/operations.md), as JSON."""
        return self.status_document().as_json()

    def status_document(self) -> StatusDocument:
        """Everything C{quicx status} shows, typed."""
        where = Where(
            self.config.source,
            [listener.address for listener in self._listeners()],
            self.config.server.control_path,
        )
        replication = None if self.node is None else self.node.status()
        return status(self.queue, self.shared, self.events, self.journal, where, replication)

    def privilegedStartService(self) -> None:
        config, pool = self.config, self.queue.pool
        self.log.info(
            "Quicx {version} (protocol {protocol}); config: {source}",
            log_id="daemon.start",
            version=__version__,
            protocol=" and ".join(f"v{v}" for v in sorted(self.queue.limits.versions)),
            source=config.source,
        )
        self.log.info(
            "pool {pool}: {count} size classes from {smallest} to {largest} bytes,"
            " {blocks:,} blocks (`quicx status` shows each class)",
            log_id="daemon.pool",
            pool=format_size(pool.pool_size),
            count=len(pool.classes),
            smallest=pool.classes[0].size,
            largest=pool.max_size,
            blocks=sum(pool.blocks_total),
        )
        if self.queue.max_result < config.results.max_size != ResultLimits().max_size:
            # Set above what the pool holds (the default often is: the docs say so).
            self.log.info(
                "results are held to {largest:,} bytes, the pool's largest block"
                " ([results] max_size is {size:,}): add a larger class to take larger ones",
                log_id="daemon.result_size",
                largest=self.queue.max_result,
                size=config.results.max_size,
            )
        if self.journal is None:
            self.log.info(
                "no journal: queued tasks are lost when the daemon stops", log_id="journal.none"
            )
        types = config.tasks.allowed_types
        self.log.info(
            "heartbeat every {interval:g} s of silence, drop after {timeout:g} s;"
            " task types: {types}; up to {connections:,} connections",
            log_id="daemon.settings",
            interval=config.server.heartbeat_interval,
            timeout=config.server.heartbeat_timeout,
            types=", ".join(sorted(t.decode() for t in types)) if types else "any",
            connections=config.limits.max_connections,
        )
        if config.server.busy_poll:
            self.log.info(
                "busy polling: {micros:g} µs before each sleep",
                log_id="daemon.busy_poll",
                micros=config.server.busy_poll * 1e6,
            )
        super().privilegedStartService()

    def close_listeners(self) -> Deferred[Any]:
        """
        After a start that failed: close the ports already open, so that no
        control socket file is left behind (it goes once the reactor runs).
        """
        return gatherResults(
            [maybeDeferred(s.stopService) for s in self if isinstance(s, ListenerService)]
        )

    def startService(self) -> None:
        super().startService()
        self.reactor.callWhenRunning(self._ready)

    def _ready(self) -> None:
        """
        SIGTERM and SIGINT stop the daemon; a second one, while it drains,
        stops the drain (twistd's own handler would stop the reactor twice).
        Logged once they are handled, after the listeners' lines.
        """
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._signalled)
        settle_garbage_collector()
        self.log.info("ready (pid {pid})", log_id="daemon.ready", pid=os.getpid())

    def _signalled(self, number: int, frame: object) -> None:
        name = signal.Signals(number).name
        if not self._stopping:
            self._stopping = True
            self.log.info("{signal}: stopping", log_id="daemon.signal", signal=name)
            set_exit_signal(self.reactor, number)
            self.reactor.callFromThread(self.reactor.stop)
            return
        self.log.info(
            "{signal} again: not waiting for the drain", log_id="daemon.signal_again", signal=name
        )
        self.reactor.callFromThread(self.queue.stop_draining)


GC_YOUNG_THRESHOLD = 10_000
"""
The daemon's threshold for Python's youngest generation (Python's own is
700): see L{settle_garbage_collector}.
"""


def settle_garbage_collector() -> None:
    """
    Once the daemon has started: what it built to start (modules,
    settings, the configuration) is moved out of the garbage collector's
    reach (C{gc.freeze}), and its youngest generation is collected after
    L{GC_YOUNG_THRESHOLD} allocations rather than 700.

    Every task the daemon holds is a tracked object that lives from its
    SUBMIT to its outcome: with Python's defaults, thousands of tasks in
    flight set off a collection every few hundred tasks, and now and then
    a full one that walks every object of the process.  Nearly everything
    the daemon allocates is freed by reference counting; cycles are still
    collected, only less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def build_daemon(config: configuration.Config, reactor: Any = None) -> QuicxDaemon:
    """Build the daemon from a configuration already loaded and checked."""
    if reactor is None:
        from twisted.internet import reactor
    # twistd -n logs to stdout, and a signalled twistd ends itself with
    # os.kill, which skips flushing: line buffering keeps the shutdown lines
    # (and every other) when stdout is a file or a supervisor's pipe.
    with suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    config = fit_file_limit(fit_busy_poll(config, reactor))
    check_directories(config)
    pool = config.allocator.pool()
    journal = open_journal(config.journal, reactor) if config.journal.path else None
    failures = LogSummary(QueueService.log, config.log.summary_interval)
    queue = QueueService(
        pool,
        config.tasks.allowed_types,
        clock=reactor.seconds,
        journal=journal,
        task_timeout=config.tasks.timeout,
        max_attempts=config.tasks.max_attempts,
        failures=failures,
        limits=config.queue_limits,
        scheduler=reactor,
        progress=config.progress,
        telemetry=Telemetry(config.metrics.max_types, config.metrics.max_series),
    )
    queue.checkpoints.settings = config.checkpoints
    shared = SharedData(queue, config.shared)
    events = event_bus(config.events, queue, reactor)
    queue.plug(shared=shared, events=events)
    factory = QuicxServerFactory(queue, reactor, config.limits, config.authorization)
    daemon = QuicxDaemon(config, queue, shared, reactor, factory.batcher, events, journal)
    factory.status = daemon.status
    factory.bulk = daemon.bulk = BulkActions(queue, config.bulk)
    if config.log.summary_interval:
        every(config.log.summary_interval, failures.flush, reactor).setServiceParent(daemon)
    # Added before the queue, stopped after it: the queue's last events
    # (tasks dropped at stop) are written.
    events.setServiceParent(daemon)
    schedules = add_state(daemon)
    add_heartbeats(daemon)
    add_listeners(daemon, factory)
    if config.replication.enabled:
        # Imported here: a daemon without [replication] loads none of it (the
        # lease store's HTTP client, the stream's two sides).
        from quicx.daemon.replication.wiring import add_replication

        daemon.node = add_replication(daemon, factory, schedules, recover_state)
    cluster = cluster_poller(daemon) if config.cluster.addresses else None
    if config.metrics.listen:
        serve_metrics(daemon, cluster, autoscaler(daemon) if config.autoscale.target else None)
    if config.web.listen:
        serve_dashboard(daemon, schedules, cluster)
    return daemon


def check_directories(config: configuration.Config) -> None:
    """
    Create C{[events] directory} if need be; check that the control socket's
    directory exists.

    @raise SystemExit: one of them is unusable; the message names the setting.
    """
    if config.events.directory:
        make_directory("[events] directory", config.events.directory)
    control = config.server.control_path
    if control is not None:
        directory = os.path.dirname(os.path.abspath(control))
        if not os.path.isdir(directory):
            raise SystemExit(f"quicx: [server] control: {control}: no such directory {directory}")


def event_bus(settings: EventSettings, queue: QueueService, reactor: Any) -> EventBus:
    """The lifecycle events' bus: to live subscribers, and to files if C{[events] directory}."""
    log = EventLog(settings, reactor) if settings.directory else None
    return EventBus(queue, reactor, log, settings.subscribers, clock=time.time)


def add_state(daemon: QuicxDaemon) -> ScheduleBook:
    """
    Add what holds the tasks to C{daemon}, in their order of start: the
    journal (its tasks, schedules and shared data restored first), the
    queue, the schedules; the schedules.
    """
    config, queue, journal = daemon.config, daemon.queue, daemon.journal
    schedules = ScheduleBook(
        queue, daemon.reactor, config.schedule_sections, config.schedules.max_schedules
    )
    queue.plug(schedules=schedules)
    if journal is not None and config.replication.enabled:
        # Restored once this daemon is the primary (see add_replication).
        JournalSlot(journal).setServiceParent(daemon)
    elif journal is not None:
        recover_state(daemon, schedules)
        # Stopped after the queue: every record is written before exit.
        journal.setServiceParent(daemon)
    else:
        schedules.restore({}, {})
    queue.setServiceParent(daemon)
    # Started after the queue (its missed firings go into it), stopped before.
    schedules.setServiceParent(daemon)
    return schedules


def recover_state(daemon: QuicxDaemon, schedules: ScheduleBook) -> None:
    """Queue the journal's tasks, schedules and shared data, and open it (see L{restore})."""
    assert daemon.journal is not None
    recovery = restore(daemon.queue, daemon.journal)
    schedules.restore(recovery.fired, recovery.schedules)
    daemon.shared.restore(recovery.shared)


def add_heartbeats(daemon: QuicxDaemon) -> None:
    """Add the timers of C{[server]}'s heartbeats and C{[tasks] timeout} (those that are on)."""
    server = daemon.config.server
    heartbeats = Heartbeats(
        daemon.queue,
        server.heartbeat_interval,
        server.heartbeat_timeout,
        daemon.reactor,
        server.spare_busy_workers,
    )
    for timer in (heartbeat_timer(heartbeats), task_timeout_timer(daemon.queue, daemon.reactor)):
        if timer is not None:
            timer.setServiceParent(daemon)


def add_listeners(daemon: QuicxDaemon, factory: QuicxServerFactory) -> None:
    """Add a listener for each task endpoint, then the control socket (unless it is off)."""
    config, reactor = daemon.config, daemon.reactor
    spare = Spare()
    for description in config.server.endpoints:
        ListenerService(
            reactor,
            description,
            factory,
            tls=config.tls,
            log_id="daemon.listening",
            listening=partial(
                answer_out_of_files,
                factory=factory,
                spare=spare,
                tls=description.startswith("tls:"),
            ),
        ).setServiceParent(daemon)
    control = config.server.control_path
    if control is not None:
        # lockfile: a socket left behind by a crashed daemon is replaced; one
        # held by a live daemon is not.
        ListenerService(
            reactor,
            f"unix:{quote_endpoint(control)}:mode=600:lockfile=1",
            ControlFactory(daemon.status, admin_factory(daemon, config)),
            announcement="control socket",
            log_id="daemon.control",
            setting="[server] control",
        ).setServiceParent(daemon)


def autoscaler(daemon: QuicxDaemon) -> Autoscaler:
    """Add the autoscaling signal of C{[autoscale]} to C{daemon}, fed by its event bus."""
    queues = daemon.queue.queues

    def queued(name: str) -> int:
        found = queues.get(name)
        return found.depth if found is not None else 0

    config = daemon.config
    scaler = Autoscaler(config.autoscale, config.queues.max_queues, queued, daemon.reactor)
    daemon.events.feed(scaler.take)
    scaler.setServiceParent(daemon)
    return scaler


def serve_metrics(
    daemon: QuicxDaemon, cluster: ClusterPoller | None = None, autoscale: Autoscaler | None = None
) -> None:
    """
    Add the Prometheus endpoint of C{[metrics] listen} to C{daemon}, with
    C{cluster}'s view and the C{autoscale} signal.
    """
    # Imported only when on: prometheus_client and twisted.web are
    # about 3 MiB of the daemon's memory (docs/operations.md, "Memory").
    from quicx.daemon.observe import metrics
    from quicx.daemon.observe.http_limits import ConnectionCap
    from quicx.daemon.observe.metrics_web import MetricsSite

    config, settings = daemon.config, daemon.config.metrics
    collector = metrics.QuicxCollector(
        daemon.queue,
        daemon.shared,
        daemon.journal,
        daemon.events,
        None if cluster is None else cluster.view,
        autoscale,
        None if daemon.node is None else daemon.node.status,
    )
    ListenerService(
        daemon.reactor,
        settings.listen,
        ConnectionCap(
            MetricsSite(
                collector, settings.max_scrapes, None if autoscale is None else autoscale.json
            ),
            settings.max_connections,
            "[metrics] max_connections",
        ),
        announcement="metrics",
        tls=config.tls,
        log_id="daemon.metrics",
        setting="[metrics] listen",
    ).setServiceParent(daemon)


def cluster_poller(daemon: QuicxDaemon) -> ClusterPoller:
    """
    Add the polling of C{[cluster] peers} to C{daemon}, every C{[cluster]
    interval} from its start (after its listeners: its own status lists them).
    """
    settings, reactor = daemon.config.cluster, daemon.reactor
    poller = ClusterPoller(
        daemon.status_document,
        settings.addresses,
        lambda peer: ask_status(reactor, peer, settings.timeout, settings.max_status),
    )
    every(settings.interval, poller.poll, reactor).setServiceParent(daemon)
    return poller


def admin_factory(daemon: QuicxDaemon, config: configuration.Config) -> QuicxServerFactory:
    """The Quicx protocol of the control socket: the admin role, the daemon's status."""
    factory = QuicxServerFactory(
        daemon.queue, daemon.reactor, config.limits, config.authorization, admin=True
    )
    factory.status = daemon.status
    factory.bulk = daemon.bulk
    daemon.control_factory = factory
    return factory


def serve_dashboard(
    daemon: QuicxDaemon, schedules: ScheduleBook, cluster: ClusterPoller | None = None
) -> None:
    """
    Add the web dashboard to C{daemon}: its history, sampled every second,
    its site on C{[web] listen} (announced as C{dashboard on ADDRESS}), and
    C{cluster}'s view, if it has one.
    """
    # Imported only when on: twisted.web is memory a daemon without a
    # dashboard need not hold.
    from quicx.daemon.observe.http_limits import ConnectionCap
    from quicx.daemon.observe.task_history import TaskHistory
    from quicx.daemon.observe.web.auth import Gate
    from quicx.daemon.observe.web.history import History
    from quicx.daemon.observe.web.site import dashboard_site

    config, queue, reactor = daemon.config, daemon.queue, daemon.reactor
    web = config.web
    history = History(queue, web.history)
    every(1.0, history.sample, reactor).setServiceParent(daemon)
    tasks = None
    if web.task_history:
        tasks = TaskHistory(
            queue.clock,
            queue.pool.head,
            web.task_history,
            web.task_history_age,
            web.payload_preview,
            web.failure_text,
            web.preview_done,
            web.task_history_bytes,
            web.search_step,
        )
        queue.plug(history=tasks)
    certificates = web.listen.startswith("tls:") and bool(config.tls.client_ca)
    gate = Gate(
        web.admin_token,
        web.monitor_token,
        config.tls.authorization if certificates else None,
    )
    site = dashboard_site(
        queue,
        schedules,
        history,
        gate,
        web.max_streams,
        None if cluster is None else cluster.view,
        tasks,
        config.limits.terminate_grace,
        daemon.bulk,
        None if daemon.node is None else daemon.node.status,
    )
    ListenerService(
        reactor,
        on_loopback(web.listen),
        ConnectionCap(site, web.max_connections, "[web] max_connections"),
        announcement="dashboard",
        tls=config.tls,
        log_id="daemon.web",
        setting="[web] listen",
    ).setServiceParent(daemon)


FILE_RESERVE = 128
"""File descriptors kept beyond max_connections and the HTTP listeners'
connections: the journal, event files, listeners, control connections,
connections being refused, and the spare that answers one past them all."""


def answer_out_of_files(
    port: IListeningPort, factory: QuicxServerFactory, spare: Spare, tls: bool = False
) -> None:
    """
    Make C{port} answer a connection it has no descriptor for with the
    documented ERROR (and log it, as a connection past C{max_connections}),
    rather than Twisted closing it unanswered.  A C{tls} port's connection
    is closed with nothing sent: the ERROR would need a handshake first, and
    a TLS client would read plain bytes as a broken record.
    """
    refusal = factory.connection_refusal(out_of_files=True)

    def answered(address: Any) -> None:
        peer = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else "unix"
        factory.queue.limit_hit(peer, refusal)

    answer = b"" if tls else wire.encode_error(refusal.code, str(refusal))
    listener = AnsweringSocket(listening_socket(port), answer, spare, answered)
    replace_listening_socket(port, listener)


def http_connections(config: configuration.Config) -> int:
    """
    The connections the HTTP listeners that are on may hold at once: over
    TLS, as many again waiting for their handshakes to be refused.
    """
    held = 0
    for listen, limit in (
        (config.web.listen, config.web.max_connections),
        (config.metrics.listen, config.metrics.max_connections),
    ):
        if listen:
            held += 2 * limit if listen.startswith("tls:") else limit
    return held


def fit_busy_poll(config: configuration.Config, reactor: Any) -> configuration.Config:
    """
    Make C{reactor} busy-poll as C{busy_poll} says.  A reactor that cannot
    (one without epoll: C{twistd --reactor=poll}, or another platform's
    default) runs without it, with a warning: busy polling is on by default,
    and only saves wake-ups.
    """
    busy_poll = config.server.busy_poll
    if not busy_poll:
        return config
    try:
        enable_busy_poll(reactor, busy_poll)
    except ValueError as e:
        QuicxDaemon.log.warn(
            "busy_poll is off: {error}", log_id="daemon.busy_poll_off", error=str(e)
        )
        return configuration.with_settings(config, busy_poll=0.0)
    return config


def fit_file_limit(config: configuration.Config) -> configuration.Config:
    """
    Raise the soft limit on open files to what C{max_connections} and the
    HTTP listeners' connections need (up to the hard limit); if it cannot go
    that high, lower C{max_connections} to fit, with a warning, so that a
    connection past it still gets the documented ERROR rather than a failed
    accept.
    """
    http = http_connections(config)
    needed = config.limits.max_connections + http + FILE_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return config
    fitted = max(1, soft - FILE_RESERVE - http)
    QuicxDaemon.log.warn(
        "max_connections lowered from {wanted} to {fitted}: the open-file limit is {soft}"
        " (hard limit {hard}); raise it (ulimit -n, LimitNOFILE=) for more",
        log_id="limit.open_files",
        wanted=config.limits.max_connections,
        fitted=fitted,
        soft=soft,
        hard=hard,
    )
    return configuration.with_settings(config, max_connections=fitted)


def make_directory(key: str, path: str) -> None:
    """
    Create C{path} if need be and check it is writable.

    @raise SystemExit: it cannot be; the message names C{key}.
    """
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise SystemExit(f"quicx: {key}: cannot create {path}: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SystemExit(f"quicx: {key}: {path} is not writable")


def open_journal(settings: JournalSettings, reactor: Any) -> Journal:
    """The journal C{[journal]} describes (its file not opened yet: see L{restore})."""
    return Journal(
        settings.path, settings.fsync, reactor, settings.compact_factor, settings.compact_min_size
    )


def restore(queue: QueueService, journal: Journal) -> Recovery:
    """
    Queue what the journal kept and open it for appending; what it kept.

    @raise SystemExit: the journal is damaged or its tasks do not fit the pool;
        the daemon does not start.
    """
    log = QuicxDaemon.log
    try:
        recovery = recover(journal.path)
    except JournalCorrupt as e:
        raise SystemExit(f"quicx: journal {e}; the daemon will not start on it") from None
    if recovery.torn_bytes:
        log.warn(
            "journal {path}: cut a torn tail of {torn} bytes at offset {offset}",
            log_id="journal.torn_tail",
            path=journal.path,
            torn=recovery.torn_bytes,
            offset=recovery.valid_length,
        )
    try:
        queue.restore(recovery)
        journal.open(recovery)
    except pmad.PmadError as e:
        raise SystemExit(
            f"quicx: journal {journal.path}: its {len(recovery.tasks)} tasks do not fit"
            f" the pool ({e}); raise pool_size"
        ) from None
    except OSError as e:
        raise SystemExit(f"quicx: journal {journal.path}: {e.strerror}") from None
    except Refused as e:
        raise SystemExit(
            f"quicx: journal {journal.path}: its tasks need more queues than allowed ({e});"
            " raise [queues] max_queues"
        ) from None
    log.info(
        "journal {path} (fsync {policy}): {records} records, {tasks} tasks recovered",
        log_id="journal.recovered",
        path=journal.path,
        policy=journal.policy.value,
        records=recovery.records,
        tasks=len(recovery.tasks),
    )
    return recovery


LISTEN_BACKLOG = 1024
"""The listen backlog unless an endpoint string sets one (Twisted's is 50:
a burst of connections past it waits a second for a SYN retransmit)."""


def with_backlog(description: str) -> str:
    """C{description} with C{:backlog=1024} added, unless it has a backlog."""
    kind = description.partition(":")[0]
    if kind in {"tcp", "tcp6", "ssl", "tls", "unix"} and "backlog=" not in description:
        return f"{description}:backlog={LISTEN_BACKLOG}"
    return description


def on_loopback(description: str) -> str:
    """
    C{description} with C{:interface=127.0.0.1} (C{::1} for C{tcp6}) added to
    a TCP or TLS endpoint that names no interface: the dashboard listens on
    loopback unless told otherwise.
    """
    kind = description.partition(":")[0]
    loopback = {"tcp": "127.0.0.1", "tls": "127.0.0.1", "ssl": "127.0.0.1", "tcp6": "\\:\\:1"}
    if kind in loopback and "interface=" not in description:
        return f"{description}:interface={loopback[kind]}"
    return description


def quote_endpoint(value: str) -> str:
    """Escape C{:} and C{=} for an endpoint string."""
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")
