"""
The network layer: addresses, framing, certificates and TLS, busy polling, spare descriptors.

I/O shared by the daemon and the clients: the Twisted framer and output
batching (L{framer}), certificates (L{certificates}, no Twisted) and TLS
endpoints (L{tls}), busy polling (L{busypoll}) and the few private Twisted
attributes the project reaches (L{private}).
"""
