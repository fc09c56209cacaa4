"""
The Quicx protocol, sans I/O: nothing here imports Twisted or touches a socket.

The shared codec (L{codec}: header, opcodes, TLV, names, counted lists);
version 1's messages (L{wire}, the protocol page's); version 2's messages by
what they are about (L{taskflow}, L{outcomes}, L{admin}, L{shared_data},
L{monitor}, L{link}); the registry with the one L{registry.decode}; the
frame parser (L{frames}), a connection's state (L{session}) and the errors
a client raises for the daemon's ERROR codes (L{errors}).
"""
