"""Runs one reply's actions as their tags close: dispatch, capture, approvals, retries,
timeouts. It stands on the core and knows nothing of turns or models."""
