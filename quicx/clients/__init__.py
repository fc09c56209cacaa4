"""
The clients: blocking, Twisted, the worker runner, Spark, and what they share.

The clients: addresses (L{address}), the blocking client (L{blocking}, no
Twisted import), the Twisted producer (L{twisted_client}), the worker runner
(L{worker}, with L{leases}) and the Spark helper (L{spark}); what they share
(L{requests}, L{outcomes}, L{timing}).
"""
