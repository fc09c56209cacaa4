"""
Quicx: a small, fast task-queue daemon and its clients, built on Twisted.
"""

__version__ = "0.1.0"
