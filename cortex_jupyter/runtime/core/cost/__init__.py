"""What a run costs and what it may spend.

- ``prices``: ``Price`` as data, the ``Priced`` protocol a model prices its requests with,
  and their sum (unknown stays unknown, never 0);
- ``budget``: ``Budget`` (dollars or tokens) and ``Spend``: every request reserves its
  worst case before it is sent (``Hold``) and settles to what the server reported
  (``charge``), so requests in flight together cannot overspend.
"""
