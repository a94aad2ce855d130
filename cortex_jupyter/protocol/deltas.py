"""Text deltas built cheaply: most of what a parser emits, so their cost is its cost.

A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for each
field; setting the slots directly halves that and gives the same frozen instance.
``thought_delta`` and ``response_delta`` are for the ordinary paths; the hottest
paths of all (a plain chunk inside a thought or a response, in ``XmlParser.feed``)
use ``new_event`` and the setters inline, without even a function's frame.
"""

from __future__ import annotations

from .events import ResponseDelta, ThoughtDelta

new_event = object.__new__
set_thought_text = ThoughtDelta.__dict__["text"].__set__
set_response_text = ResponseDelta.__dict__["text"].__set__
set_response_final = ResponseDelta.__dict__["final"].__set__


def thought_delta(text: str) -> ThoughtDelta:
    event: ThoughtDelta = new_event(ThoughtDelta)
    set_thought_text(event, text)
    return event


def response_delta(text: str, final: bool) -> ResponseDelta:
    event: ResponseDelta = new_event(ResponseDelta)
    set_response_text(event, text)
    set_response_final(event, final)
    return event
