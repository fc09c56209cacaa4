"""
Settings of the test project: SQLite at C{$QUICX_DJANGO_DB}, and two Quicx
task backends on the daemon at C{$QUICX_ADDRESS} (the test's, and its worker's).
"""

import os

SECRET_KEY = "tests only"
USE_TZ = True
INSTALLED_APPS: list[str] = []
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("QUICX_DJANGO_DB", ":memory:"),
    }
}
TASKS = {
    "default": {
        "BACKEND": "quicx.contrib.django.QuicxBackend",
        "QUEUES": ["default", "later"],
        "OPTIONS": {"TIMEOUT": 10},
    },
    # Retries a failure twice, 10 ms apart (Quicx's own retries).
    "retrying": {
        "BACKEND": "quicx.contrib.django.QuicxBackend",
        "OPTIONS": {"RETRIES": 2, "BACKOFF": "fixed:10ms", "RESULT_TTL": "10m"},
    },
}
