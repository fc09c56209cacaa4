"""
Enqueue one task and print its result once a worker has run it:

    export DJANGO_SETTINGS_MODULE=examples.django_app.settings
    quicx worker --django &              # the worker, in a terminal of its own
    python -m examples.django_app.enqueue Ada
"""

import sys
import time

import django


def main(name: str) -> None:
    django.setup()
    from examples.django_app.tasks import welcome

    result = welcome.enqueue(name)
    print("enqueued", result.id)
    deadline = time.monotonic() + 60
    while not result.is_finished and time.monotonic() < deadline:
        time.sleep(0.05)
        result.refresh()
    if result.status == "SUCCESSFUL":
        print(result.return_value)
    else:
        print(result.status, *(error.traceback for error in result.errors))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "Ada")
