"""The tag dialects: cortex (``<thought>``/``<action>``/``<response>``), cogency and hermes.

A package because the dialects are three things that change for different reasons:
``dialects`` says which tags mean something where (data: a new dialect is a new
table), ``parser`` is the state machine and its fast paths that read them as text
streams in, and ``drafts`` and ``forged`` hold what the parser keeps while a block is
still open (an action waiting for its body; a block only the run may write).
"""

from __future__ import annotations

from .dialects import FORGED_TAGS, OPENERLESS_HOLD, TABLES
from .parser import XmlParser

__all__ = ["FORGED_TAGS", "OPENERLESS_HOLD", "TABLES", "XmlParser"]
