"""
The queue domain: tasks, their queues and lifecycle, and what follows from them.

Nothing here listens on a socket or encodes a frame of its own accord: the
Twisted shell above (C{quicx.daemon.server}, C{quicx.daemon.service}) moves
bytes and time, and hands this package what arrived.
"""
