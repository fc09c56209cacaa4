"""A small Django project for tests/contrib/test_django_tasks.py: its settings and tasks."""
