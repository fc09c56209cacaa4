"""
Checks across settings: what no single value's syntax can say, alike for a file and for flags.
"""

from __future__ import annotations

from quicx.daemon.config.declarations import BY_NAME
from quicx.daemon.config.sections import Config
from quicx.daemon.queue import pmad

ROLES = ("tls_producers", "tls_workers", "tls_monitors", "tls_admins")
"""The C{[tls]} settings that name who may take a role."""


class Conflict(ValueError):
    """
    Settings that cannot go together.

    @ivar names: the settings to blame, the likeliest first.
    @ivar index: which of a repeatable setting's values, when one is.
    """

    def __init__(self, message: str, *names: str, index: int | None = None) -> None:
        super().__init__(message)
        self.names = names
        self.index = index


def validate(config: Config) -> None:
    """
    Check a configuration as a whole; its pool is laid out (not reserved)
    so that a layout that does not fit is refused before the daemon starts.

    @raise Conflict: it is unusable.
    """
    server, tls, web = config.server, config.tls, config.web
    if server.heartbeat_interval and server.heartbeat_timeout <= server.heartbeat_interval:
        raise Conflict(
            f"heartbeat_timeout ({server.heartbeat_timeout:g} s) must be longer than"
            f" heartbeat_interval ({server.heartbeat_interval:g} s)",
            "heartbeat_timeout",
            "heartbeat_interval",
        )
    roles = [BY_NAME[name] for name in ROLES if BY_NAME[name].read(config) is not None]
    if roles and not tls.client_ca:
        raise Conflict(
            f"{roles[0].key} needs client_ca: identities come from client certificates",
            roles[0].name,
        )
    if (
        web.listen
        and not (web.admin_token or web.monitor_token)
        and not (web.listen.startswith("tls:") and tls.client_ca)
    ):
        raise Conflict(
            "[web] listen needs admin_token or monitor_token (or a tls: listener and"
            " [tls] client_ca): without one no request would get in",
            "web_listen",
        )
    _check_autoscale(config)
    _check_counts(config)
    _check_replication(config)
    try:
        config.allocator.layout()
    except pmad.LayoutError as e:
        raise Conflict(str(e), "classes", "pool_size", index=e.index) from None


def _check_autoscale(config: Config) -> None:
    """The signal is served on the metrics listener, and its floor is under its ceiling."""
    autoscale = config.autoscale
    if autoscale.target and not config.metrics.listen:
        raise Conflict(
            "[autoscale] target needs [metrics] listen: the signal is served there",
            "autoscale_target",
            "metrics_listen",
        )
    if autoscale.min_workers > autoscale.max_workers:
        raise Conflict(
            f"[autoscale] min_workers ({autoscale.min_workers}) is more than max_workers"
            f" ({autoscale.max_workers})",
            "autoscale_min_workers",
            "autoscale_max_workers",
        )


def _check_counts(config: Config) -> None:
    """The named sections against their bounds. @raise Conflict: too many."""
    max_queues = config.queues.max_queues
    queues = {*config.queue_sections, config.protocol.default_queue}
    if len(queues) > max_queues:
        raise Conflict(
            f"{len(queues)} queues exist from the start (the [queue NAME] sections and the"
            f" default queue), more than max_queues = {max_queues}",
            "max_queues",
        )
    max_schedules = config.schedules.max_schedules
    if len(config.schedule_sections) > max_schedules:
        raise Conflict(
            f"{len(config.schedule_sections)} [schedule NAME] sections, more than"
            f" max_schedules = {max_schedules}",
            "max_schedules",
        )


def _check_replication(config: Config) -> None:
    """A daemon of a shard has a replication listener and a journal to replicate."""
    replication = config.replication
    if not replication.enabled:
        return
    if not replication.listen:
        raise Conflict(
            "[replication] etcd needs listen: the standbys replicate from that endpoint",
            "replication_etcd",
            "replication_listen",
        )
    if not config.journal.path:
        raise Conflict(
            "[replication] etcd needs [journal] path: what is replicated is the journal",
            "replication_etcd",
            "journal",
        )
    if not replication.replication_address:
        raise Conflict(
            "[replication] etcd needs advertise: listen is not TCP on a port of its own, to"
            " tell the standbys where to replicate from",
            "replication_etcd",
            "replication_advertise",
        )
    if not replication.client(config.server.endpoints):
        raise Conflict(
            "[replication] etcd needs client_address: no [server] endpoint is TCP on a port"
            " of its own, to tell clients where the primary is",
            "replication_etcd",
            "replication_client_address",
        )
