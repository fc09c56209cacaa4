"""The project's tasks, as Django writes them."""

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2 and the django-tasks backport


@task(priority=10)
def welcome(name: str) -> str:
    """The welcome message for C{name} (a real one would send it)."""
    return f"Welcome, {name}!"
