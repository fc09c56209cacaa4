"""
What C{quicx status} shows.

What C{quicx status} shows: numbers as text (L{text}), what went through
the daemon between two status documents (L{activity}), and the view that
C{--watch} refreshes (L{watch}).
"""
