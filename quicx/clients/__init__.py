"""
The clients: addresses (L{address}), the blocking client (L{blocking}, no
Twisted import), the Twisted producer (L{twisted_client}), the worker runner
(L{worker}) and the Spark helper (L{spark}).
"""
