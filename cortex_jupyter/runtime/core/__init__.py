"""The bottom of the runtime: the action graph and node statuses, the run record, events,
errors, variables, scope and secrets, the tool registry and the model interface.
It imports nothing above it."""
