"""
Many daemons: a host's instances, the supervisor that runs them, and the cluster view's peers.
"""
