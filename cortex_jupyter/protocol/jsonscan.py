"""Where a JSON string ends, in text that may stop anywhere (a chunk of a stream).

Both readers of JSON as it streams (an action's body, a list of calls) look for a
closing tag or terminator only outside strings; inside one, only an unescaped ``"``
matters. A chunk may end inside the string, or just after a backslash, whose
escaped character is then the first of the next chunk.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r'["\\]')

#: ``string_end``: the string goes on past the end of the text.
OPEN = -1
#: ``string_end``: the text ends with a backslash; the next character is escaped.
ESCAPED = -2


def string_end(data: str, i: int) -> int:
    """Inside a JSON string at ``data[i]``: the index just past its closing quote,
    or ``OPEN`` or ``ESCAPED`` (both negative) when the text ends first."""
    n = len(data)
    while True:
        m = _SPECIAL.search(data, i)
        if m is None:
            return OPEN
        k = m.start()
        if data[k] == '"':
            return k + 1
        if k + 1 >= n:
            return ESCAPED
        i = k + 2
