"""
The worker of the web examples (examples/fastapi_app.py, examples/flask_app.py):
`count_words` counts a text's words, and returns how many and the most common
as the task's result.  A text without words fails the task for good.

    quicx worker examples.words:worker
"""

import json
from collections import Counter

from quicx import Unrecoverable, Worker

worker = Worker()


@worker.handler("count_words")
def count_words(payload: bytes) -> dict[str, object]:
    words = json.loads(payload)["text"].lower().split()
    if not words:
        raise Unrecoverable("no words to count")
    return {"words": len(words), "most_common": Counter(words).most_common(3)}
