"""
The project's settings: Django's Tasks framework on Quicx.

The daemon is $QUICX_ADDRESS (default tcp:127.0.0.1:16381); the database,
which the tasks do not need, SQLite in memory.
"""

SECRET_KEY = "an example: not for production"
USE_TZ = True
INSTALLED_APPS: list[str] = []
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

TASKS = {
    "default": {
        "BACKEND": "quicx.contrib.django.QuicxBackend",
        "QUEUES": ["default"],
        # ADDRESS left out: $QUICX_ADDRESS. Outcomes kept for an hour.
        "OPTIONS": {"RESULT_TTL": "1h", "RETRIES": 2},
    }
}
