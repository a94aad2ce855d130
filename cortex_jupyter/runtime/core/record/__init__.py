"""What a run records: everything one run did, kept as it happened.

- ``graph``: action nodes, their statuses and the dependency bookkeeping (pure);
- ``captured``: what a tool writes, joined and redacted a batch at a time;
- ``joining``: a model's text deltas joined before they are written, so no secret is kept
  in pieces;
- ``run``: the run record (``Run``), built from events, saved and loaded as JSON lines;
- ``order``: the order comparisons read a run's top-level actions in (start order);
- ``observer``: observers of a run (what the store and tracing plug into) and the one hook
  the scheduler gives them.
"""
