"""
Quicx inside other frameworks, each in a subpackage that imports its framework.

Nothing here is imported by the rest of C{quicx}: each integration builds on
the clients' public API only, and its framework is an optional extra
(C{pip install 'quicx[django]'}).
"""
