"""
The server's message handlers, by concept: what the daemon does with each message a client sends.

They mirror L{quicx.protocol}'s modules: L{taskflow} (SUBMIT, READY, and a
delivery's report: DONE, FAILED, ACK, NACK), L{outcomes} (TOUCH, PROGRESS,
AWAIT, GROUP), L{admin} (CANCEL, PAUSE, RESUME, PURGE, QUEUES, PEEK,
INSPECT, dead letters, schedules), L{shared_data} (PUBLISH, FOLLOW),
L{monitor} (STATS, WATCH, STATUS) and L{link} (HELLO, HEARTBEAT, PONG).
Each handler is a plain function of the L{connection.Connection} it came on
and the frame's payload; L{tables} says which one answers each message type
of each protocol version.  The Twisted shell (L{quicx.daemon.server}) frames,
checks and orders; the handlers decode, ask the queue, and reply.

A new message a client sends: its type, layout and codec in the
L{quicx.protocol} module of its concept; its handler here, in the module of
the same name; one line in L{tables}; and, if it needs more of its
connection than L{connection.Connection} offers, a method there and in the
shell.  Imports go down only: the handlers import the queue and the
protocol, the shell imports them, never the reverse.
"""
