"""
The Quicx protocol, sans I/O: nothing here imports Twisted or touches a socket.

The Quicx protocol, sans I/O: the wire codec (L{wire}), the frame parser
(L{frames}), a connection's state (L{session}) and the errors a client
raises for the daemon's ERROR codes (L{errors}).  Nothing here imports
Twisted or touches a socket.
"""
