"""
The status documents' contract, shared by the daemon and its readers (no Twisted).

The status documents, the contract between the daemon that writes them and
whatever reads them (C{quicx status}, the dashboard, the metrics, a peer):
pure functions and constants over them, importing nothing else of Quicx.
The latency histograms' bounds and quantiles (L{latency}), a cluster's
daemons side by side (L{cluster}), byte counts as text (L{units}).
"""
