"""
A set of daemons on one host: each one's configuration, and its clients' address list.

A set of daemons on one host (C{quicx start --processes N}, or one
C{quicx start --instance I} per systemd unit): what daemon I of the set is
configured with, and the address list its clients take.

Daemon I is the configuration with each thing two daemons cannot share
made its own:

    - its task port is C{port + I}; with C{listen}, each C{tcp:}, C{tcp6:},
      C{ssl:} or C{tls:} endpoint's port goes up by I, and a C{unix:} path
      gets C{.I} (as the paths below); so do C{[metrics] listen} and
      C{[web] listen};
    - its control socket and pid file (the ones configured, or the
      defaults for C{port}) get C{.I} before their extension:
      C{quicx-16381.sock} -> C{quicx-16381.2.sock};
    - its journal goes into a directory C{I} beside the configured file
      (C{/var/lib/quicx/tasks.journal} -> C{/var/lib/quicx/2/tasks.journal}),
      and its lifecycle events into C{[events] directory/I};
    - its C{[cluster] peers} leave out its own address (L{address_of}), so
      that one list of every daemon of the set serves each of them.

The daemons share nothing else: a task never crosses them.  Pure functions
of the configuration; nothing here starts a process.
"""

from __future__ import annotations

import os
import socket

from quicx.daemon.config import Config, ConfigError, with_settings
from quicx.daemon.config.endpoints import (
    PORT_KINDS,
    WILDCARDS,
    field_value,
    key_field,
    split_endpoint,
    unescape,
)

MAX_PROCESSES = 256
"""The most daemons one C{quicx start --processes} runs."""


def indexed(path: str, index: int) -> str:
    """C{path} with C{.INDEX} before its extension: C{a/quicx.sock} -> C{a/quicx.2.sock}."""
    root, extension = os.path.splitext(path)
    return f"{root}.{index}{extension}"


def _key(kind: str) -> str | None:
    """The field an instance changes in an endpoint of this kind."""
    return "port" if kind in PORT_KINDS else "address" if kind == "unix" else None


def endpoint_port(description: str) -> int | None:
    """The port of a C{tcp:}-like endpoint string; C{None} for another kind."""
    fields = split_endpoint(description)
    where = key_field(fields, "port") if fields[0] in PORT_KINDS else None
    value = "" if where is None else field_value(fields[where])
    return int(value) if value.isdigit() else None


def shifted_endpoint(description: str, index: int, setting: str) -> str:
    """
    Endpoint string C{description} for daemon C{index}: its port plus
    C{index} (a port of 0 stays 0), or its C{unix:} path L{indexed}.

    @raise ConfigError: another kind of endpoint, or no port or path in it.
    """
    from quicx.daemon.service import quote_endpoint

    fields = split_endpoint(description)
    key = _key(fields[0])
    where = None if key is None else key_field(fields, key)
    if key is None or where is None:
        raise ConfigError(
            f"{setting} = {description}: several daemons need tcp:, tls: or unix: endpoints"
            " (each daemon gets its own port or path)"
        )
    named = len(split_endpoint(fields[where], "=")) > 1
    value = field_value(fields[where])
    if key == "address":
        changed = quote_endpoint(indexed(value, index))
    elif value.isdigit():
        changed = str(int(value) + index if int(value) else 0)
    else:
        raise ConfigError(f"{setting} = {description}: {value!r} is not a port number")
    fields[where] = f"{key}={changed}" if named else changed
    return ":".join(fields)


def instance_config(config: Config, index: int) -> Config:
    """
    The configuration of daemon C{index} of a set of C{config}'s daemons
    (see the module's docstring).

    @raise ConfigError: C{config} has an endpoint no instance can shift.
    """

    def shifted(description: str, setting: str) -> str:
        return shifted_endpoint(description, index, setting) if description else ""

    server = config.server
    control = server.control_path
    journal = config.journal.path
    if journal:
        head, tail = os.path.split(journal)
        journal = os.path.join(head, str(index), tail)
    events = config.events.directory
    own = with_settings(
        config,
        port=server.port + index if server.port else 0,
        listen=tuple(shifted(d, "[server] listen") for d in server.listen),
    )
    peers = [peer for peer in config.cluster.addresses if peer != address_of(own)]
    return with_settings(
        own,
        cluster_peers=", ".join(peers),
        control="none" if control is None else indexed(control, index),
        pid_file=indexed(server.pid_path, index),
        journal=journal,
        events_directory=os.path.join(events, str(index)) if events else "",
        metrics_listen=shifted(config.metrics.listen, "[metrics] listen"),
        web_listen=shifted(config.web.listen, "[web] listen"),
    )


def instance_configs(config: Config, count: int) -> list[Config]:
    """
    The configurations of C{count} daemons: L{instance_config} of each index.

    @raise ConfigError: C{count} out of range; a task port of 0 with more
        than one (each daemon would pick its own, and no address list could
        be given); a port past 65535.
    """
    if not 1 <= count <= MAX_PROCESSES:
        raise ConfigError(f"--processes {count}: from 1 to {MAX_PROCESSES}")
    task_ports = [endpoint_port(d) for d in config.server.endpoints]
    if count > 1 and 0 in task_ports:
        raise ConfigError(
            f"--processes {count} needs a fixed port (the daemons take port, port + 1, ...):"
            " port 0 would pick one per daemon"
        )
    others = [endpoint_port(d) for d in (config.metrics.listen, config.web.listen) if d]
    highest = max((p for p in [*task_ports, *others] if p), default=0) + count - 1
    if highest > 65535:
        raise ConfigError(f"--processes {count} needs ports up to {highest}, past 65535")
    return [instance_config(config, index) for index in range(count)]


def address_of(config: Config) -> str:
    """
    The address a client gives for a daemon of C{config}: its first task
    endpoint as C{tcp:HOST:PORT}, C{tls:HOST:PORT} or C{unix:PATH}; HOST is
    the interface it listens on, or this host's name for all of them.
    """
    fields = split_endpoint(config.server.endpoints[0])
    kind = fields[0]
    key = _key(kind)
    where = None if key is None else key_field(fields, key)
    if where is None:
        raise ConfigError(f"{config.server.endpoints[0]}: not an endpoint clients can connect to")
    if kind == "unix":
        return f"unix:{field_value(fields[where])}"
    named = dict(split_endpoint(f, "=") for f in fields[1:] if len(split_endpoint(f, "=")) == 2)
    host = unescape(named.get("interface", ""))
    if host in WILDCARDS or kind == "tcp6":
        host = socket.gethostname()
    return f"{'tls' if kind in {'tls', 'ssl'} else 'tcp'}:{host}:{field_value(fields[where])}"
