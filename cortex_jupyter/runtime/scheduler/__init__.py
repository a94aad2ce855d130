"""Runs one reply's actions as their tags close. It stands on the core and knows nothing
of turns or models.

- ``spec``: ``RunSpec``, what a run is (registry, reachable names, model, approval rules,
  the host's hooks, limits), and the retry and internal-action policies;
- ``dispatch``: the ``Scheduler``, which turns parser events into running actions;
- ``calls``: what calling one tool means (threads, executors, generators, exits);
- ``capture``: what a tool prints, logs and reports as progress, kept on its node;
- ``approval``: who says yes before an action runs, and for how long they may think;
- ``stream``: a whole stream at once, for scripts, tests and benchmarks.
"""
