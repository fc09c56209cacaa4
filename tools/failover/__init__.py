"""
The failover matrix: a replicated shard (etcd and two or three daemons on
loopback, in a private network namespace) under a steady load of producers
and workers, one fault injected per row, and what each fault cost, counted.

    python -m tools.failover                   # every row; prints the table
    python -m tools.failover --rows kill-primary,zombie --json-out matrix.json
    python -m tools.failover --write-docs      # and rewrites docs/operations.md's table

Modules, one job each: L{trace} (what the load saw, as records),
L{count} (pure counting over a trace), L{proxy} (a cuttable TCP proxy
process), L{netns} (the private network namespace), L{shard} (etcd, the
daemons, their proxies and configs), L{load} (producers, workers, role
polling, the final read), L{rows} (one function per fault), L{report}
(the table, and the docs), L{cli} (the command line).

Not part of the wheel: run it from the repository root with quicx installed.
"""
