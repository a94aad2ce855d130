"""The spans a Phoenix server holds for a project, read with Phoenix's own client (in a
script's process, so the test process never imports Phoenix, whose import takes ~30 s).

    python tests/traces/phoenix_spans.py BASE_URL PROJECT [AT_LEAST]

``spans(...)`` (which ``phoenix_cell.py`` calls in its own process, after its run) waits
up to a minute until the project holds ``AT_LEAST`` spans (Phoenix ingests them a moment
after they arrive); the script prints them as one JSON list: each span's name, ids,
parent id and attributes.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from phoenix.client import Client


def spans(base_url: str, project: str, at_least: int) -> list[dict[str, Any]]:
    client = Client(base_url=base_url)
    deadline = time.monotonic() + 60
    while True:
        try:
            found = client.spans.get_spans(project_identifier=project, limit=1000)
        except Exception:  # the project does not exist until its first span is ingested
            found = []
        if len(found) >= at_least or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return [dict(span) for span in found]


def main(base_url: str, project: str, at_least: int) -> None:
    print(json.dumps(spans(base_url, project, at_least), default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
