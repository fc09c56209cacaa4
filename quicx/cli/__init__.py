"""
The C{quicx} command.

    quicx start [--config FILE] [--SETTING VALUE ...]      run the daemon
    quicx stop [--config FILE]                             stop it (SIGTERM)
    quicx status [--config FILE] [--json] [--classes]      what it is doing
    quicx status --watch [--interval S] [--count N]        ... live, every second
    quicx status --connect A,B,... [--json] [--watch]      a cluster, side by side
    quicx submit TYPE PAYLOAD|- [--wait] [--queue Q] [--priority N] [--key K]
                 [--delay 30s | --at TIME] [--retries N] [--backoff exponential:1s:5m]
                 [--keep-result [--result-ttl 1h]] [--debounce replace:2s]
                 [--expires-in 10m | --expires-at TIME]
                 [--after ID,ID] [--after-group G] [--on-parent-failure continue]
    quicx result ID [--wait] | group GID [--wait]          outcomes, from anywhere
    quicx publish NAME FILE|- | publish NAME --delete      shared data for workers
    quicx queues | peek QUEUE | task ID | schedules [--json]   look inside
    quicx events --follow [--queue Q] [--type T] [--kind K] [--json] [--count N]   live
    quicx cancel ID | pause Q | resume Q | purge Q --yes   act (admin)
    quicx dlq list [Q] | show ID | replay ID|--all | purge [Q] --yes   dead letters
    quicx schedule add NAME (--cron EXPR | --every 10m) TYPE PAYLOAD | remove NAME
    quicx worker MODULE:OBJECT [-n N] [--queues A,B] [--follow NAME]   run handlers
    quicx version | quicx init | quicx report | quicx repair-journal

Commands that talk to a daemon find it the same way: C{--connect ADDRESS}
(default C{$QUICX_ADDRESS}) for the wire, C{--config FILE} (default
C{$QUICX_CONFIG}) for its settings, control socket and pid file; any setting's
flag (C{--control}, C{--pid-file}, ...) overrides the file's.  The admin
commands (cancel, pause, resume, purge, dlq replay and purge, schedule) go
through the control socket, which only the daemon's user may open.

Mistakes users make (daemon down, bad address, bad configuration) end in one
line on stderr and a non-zero exit, never a traceback.

One module per command group, each adding its commands' parsers next to their
handlers: L{daemon} (start, stop, init, version, repair-journal), L{status},
L{tasks} (submit, result, task, cancel), L{shared} (publish, group),
L{queues} (queues, peek, pause, resume, purge), L{dlq}, L{schedules},
L{events} (events, report), L{worker}; L{arguments} and L{common} hold what
they share, L{app} puts them together.
"""

from quicx.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
