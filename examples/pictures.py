"""
The worker for the README's results, shared data and groups: a `resize`
handler, whose return value is the task's result, and which makes the
thumbnail sizes that every worker following the shared data `sizes` has.

Publish the sizes (again whenever they change: the workers get each new
version), then run the worker on its own queue:

    quicx publish sizes examples/sizes.json
    quicx worker examples.pictures:worker --queues pictures --follow sizes
    quicx submit resize cat.png --queue pictures --wait

A real handler would open the picture (with Pillow, say) and write each
thumbnail; this one names them, so that it runs without pictures or
libraries.
"""

import json

from quicx import TaskContext, Unrecoverable, Worker

worker = Worker()


@worker.handler("resize")
def resize(payload: bytes, context: TaskContext) -> dict[str, object]:
    sizes = context.shared.get("sizes")
    if sizes is None:
        raise Unrecoverable("no sizes: quicx publish sizes FILE, and run the worker --follow sizes")
    picture = payload.decode()
    stem, dot, extension = picture.rpartition(".")
    if not dot:
        stem, extension = picture, "png"
    thumbnails = [f"{stem}-{width}x{height}.{extension}" for width, height in json.loads(sizes)]
    return {"picture": picture, "thumbnails": thumbnails}
