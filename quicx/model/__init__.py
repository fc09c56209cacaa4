"""
Pure models of the daemon that the daemon and the report share: no I/O, no Twisted, no Spark.
"""
