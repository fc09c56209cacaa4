"""
A backend of Django's Tasks framework: C{@task} functions queued in Quicx, run by its workers.

C{quicx worker --django} runs them.

In settings::

    TASKS = {"default": {"BACKEND": "quicx.contrib.django.QuicxBackend",
                         "QUEUES": ["default"],
                         "OPTIONS": {"ADDRESS": "tcp:127.0.0.1:16381"}}}

Django 6 (C{django.tasks}) or Django 5.2 with the C{django-tasks} backport;
see docs/integrations.md.
"""

from quicx.contrib.django.backend import QuicxBackend, enqueue_on_commit

__all__ = ["QuicxBackend", "enqueue_on_commit"]
