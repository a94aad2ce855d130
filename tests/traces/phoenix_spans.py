"""The spans a Phoenix server holds for a project, read with Phoenix's own client (run as
a script, so the test process never imports Phoenix).

    python tests/traces/phoenix_spans.py BASE_URL PROJECT

Prints one JSON list: each span's name, ids, parent id and attributes.
"""

from __future__ import annotations

import json
import sys

from phoenix.client import Client


def main(base_url: str, project: str) -> None:
    spans = Client(base_url=base_url).spans.get_spans(project_identifier=project, limit=1000)
    print(json.dumps(list(spans), default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
