"""
A long task that checkpoints its progress, and resumes from it when it runs again.

Run it with the `quicx` command:

    quicx worker examples.checkpoints:worker

and submit a job of 10 rows whose worker dies at row 5:

    quicx submit copy_rows '{"rows": 10, "crash_at": 5}' --keep-result

The handler walks the rows with C{context.iterate}, which saves the index of
the next row in a checkpoint after each one (it returns once the daemon
holds it durably: the handler runs in a thread).  At row 5 the worker dies
(C{os._exit}, as a crash or a C{kill -9} would end it), so the daemon takes
the task back.  Started again, the worker gets the task with its
checkpoint, and C{iterate} resumes at row 5 instead of row 0: rows 0 to 4
are not copied twice.  C{quicx task ID} shows the checkpoint while the task
waits.
"""

import json
import os

from quicx import TaskContext, Worker

worker = Worker()


@worker.handler("copy_rows", thread=True)
def copy_rows(payload: bytes, context: TaskContext) -> dict:
    job = json.loads(payload)
    resumed_at = context.checkpoint_state  # None on a first run
    for row in context.iterate(range(job["rows"])):
        print(f"attempt {context.attempt}: copied row {row}", flush=True)
        if row == job.get("crash_at") and not context.resumed:
            os._exit(1)  # the worker dies in the middle of the job
    return {"rows": job["rows"], "resumed_at": resumed_at}
