"""The test project's tasks: each a module-level function, as Django requires."""

from __future__ import annotations

import asyncio

from django.db import connection

try:
    from django.tasks import task
except ImportError:  # Django 5.2 and the django-tasks backport
    from django_tasks import task


class Declined(Exception):
    """A task's own exception: its class path travels with the failure."""


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(priority=-50)
def echo(value: object) -> object:
    return value


@task()
def fail(message: str) -> None:
    raise Declined(message)


@task()
def fail_builtin(key: str) -> None:
    raise KeyError(key)


@task(backend="retrying", takes_context=True)
def flaky(context: object) -> int:
    """Fails its first attempt, succeeds the next: returns the attempt."""
    attempt: int = context.attempt  # type: ignore[attr-defined]
    if attempt == 1:
        raise ConnectionError("first attempt fails")
    return attempt


@task()
async def double(value: int) -> int:
    await asyncio.sleep(0)
    return value * 2


@task()
def read_row(key: str) -> str | None:
    """The value stored under C{key} in table C{notes}: what a committed transaction wrote."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM notes WHERE key = %s", [key])
        row = cursor.fetchone()
    return None if row is None else row[0]
