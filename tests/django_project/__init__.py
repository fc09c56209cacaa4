"""A small Django project for tests/test_django_tasks.py: its settings and tasks."""
