"""The spans a Phoenix server holds for a project, read with Phoenix's own client (run as
a script, so the test process never imports Phoenix, whose import is slow).

    python tests/traces/phoenix_spans.py BASE_URL PROJECT [AT_LEAST]

Waits (up to a minute) until the project holds ``AT_LEAST`` spans (Phoenix ingests them
a moment after they arrive), then prints one JSON list: each span's name, ids, parent id
and attributes.
"""

from __future__ import annotations

import json
import sys
import time

from phoenix.client import Client


def main(base_url: str, project: str, at_least: int) -> None:
    client = Client(base_url=base_url)
    deadline = time.monotonic() + 60
    while True:
        try:
            spans = client.spans.get_spans(project_identifier=project, limit=1000)
        except Exception:  # the project does not exist until its first span is ingested
            spans = []
        if len(spans) >= at_least or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(json.dumps(list(spans), default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
