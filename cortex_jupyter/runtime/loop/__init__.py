"""The agent loop: it asks the model, feeds each reply to the scheduler, and sends the
results back until there is an answer. It stands on the scheduler and the core.

- ``agent``: ``Agent``, the configuration users write, and its runs (nested ones too);
- ``turns``: ``Loop``, one run's turns: streaming a reply, deciding what it asks for;
- ``conversation``: the memory runs continue;
- ``prompt``: the system prompt and how results are written back;
- ``context``: the context budget (fitting, condensing, summarising);
- ``transcript``, ``resume``: saved runs, and reading on from a cut reply;
- ``pickup``: where a stopped run stands, so ``Agent.resume`` goes on with it as itself;
- ``reply``: pieces of reading one reply (its chunks recorded, native calls, repeats);
- ``feeds``: context feeds (``$id`` values refreshed on demand or periodically);
- ``request``, ``grammar``: extra request fields, and protocol-constrained decoding;
- ``spending``: each reply's price recorded, and the budget checked before each request.
- ``typed_answer``: a typed run's answer turn (check, send the errors back, or fail).
"""
