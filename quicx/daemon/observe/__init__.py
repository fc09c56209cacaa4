"""
What the daemon shows of itself: lifecycle events, telemetry, metrics, logs and the dashboard.
"""
