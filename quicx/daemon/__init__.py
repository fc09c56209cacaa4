"""
The daemon: the queue, its storage, its servers, its settings and its twistd wiring.

The daemon: the queue (L{core}) over the PMAD allocator (L{pmad}) and the
journal (L{journal}), the Twisted server protocol (L{server}), lifecycle
events (L{events}), timers (L{timers}), the control socket (L{control}),
the web dashboard (L{web}), the settings table (L{settings}) and the
twistd plugin's wiring (L{tap}).
"""
