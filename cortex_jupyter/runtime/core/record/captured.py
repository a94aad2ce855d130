"""What a tool writes, joined and redacted a batch at a time (``CapturedText``).

A tool writes in pieces (``print("line", i)`` is four writes) and a secret may be split
across them: redacted piece by piece, neither half is a secret, and the store, the
transcript and the views would keep both halves. Redacting on every write is what made
a tool printing 100,000 lines 45 times slower than the same call made directly. So a
write only adds its piece to an in-memory ``io.StringIO`` (a C call: no lock, no
redaction), and the run's flusher, at most ``FLUSH_HZ`` times a second, ``take``s what
gathered: it joins it to
what it held back last time, redacts it as one text with the secrets' compiled pattern
(kept until the secrets change), and settles it up to a **safe cut** (``safe_cut``): a
place that no occurrence of a secret, in any of its forms, crosses, whole or only begun,
nor the part of one next to a ``...`` another library wrote where it cut a text. What
lies past the cut (at most about the longest form of a secret; nothing when no secret is
set or the text does not end as a secret begins) waits for the next batch, and the end
of the action takes everything. So no batch edge cuts a secret, and a batch costs one
pass of the pattern over new text, however many writes made it.
"""

from __future__ import annotations

import bisect
import io
import re
import threading
from typing import NamedTuple, Protocol

from cortex_jupyter.runtime.core.trust.secrets import MIN_FRAGMENT, hide_edges, secrets

__all__ = ["CapturedText", "safe_cut"]

# Where another library cut a text (``secrets`` hides the part of a secret beside one),
# and a mark still being written at the end of a text.
_MARK = re.compile(r"\.{3,}|…|\.\.?\Z")


class CapturedText:
    """One stream of what an action wrote (its stdout or its stderr).

    ``write`` (an attribute: a C-level callable, any thread, no lock) takes a raw piece
    and returns its length, as a stream's ``write`` does: it is the ``write`` of an
    in-memory ``io.StringIO``, the *sink*, so that a ``print`` inside an action costs
    about what it costs into a ``StringIO``. ``take`` (the flusher) reads what the sink
    gained since the last take (reading changes nothing a writer sees: no write is lost
    or split), keeps it up to ``limit`` raw characters and settles it, redacted. Past
    ``limit`` what is written is only counted in ``dropped`` and the sink emptied at each
    take (so memory stays bounded; a write landing while it is emptied may go uncounted).
    ``text()`` is everything settled plus the rest as it reads now (redacted, a secret's
    beginning at its end hidden), so a reader never sees a secret however the pieces
    fell. ``len()`` counts the raw characters kept (what ``limit`` bounds); ``cut()``
    says the raw text stopped there (``dropped`` counts the rest), so its end is a cut.
    A text given to the constructor (read back from a transcript or the store) is
    settled as it is.
    """

    __slots__ = (
        "_ended", "_held", "_lock", "_read", "_settled", "_sink", "dropped", "full", "limit",
        "size", "write",
    )  # fmt: skip

    def __init__(self, text: str = "") -> None:
        self._lock = threading.Lock()
        self._sink = io.StringIO(newline="")  # raw, as written (writers only append)
        self.write = self._sink.write
        self._read = 0  # characters of the sink taken
        self.size = len(text)  # raw characters kept (taken, or held back)
        self.limit: int | None = None  # the most raw characters kept (None: no limit)
        self._settled: list[str] = [text] if text else []
        self._held = ""  # raw text past the last safe cut
        self.full = False  # the raw text ends where characters were dropped
        self.dropped = 0  # characters written past that end (not kept)
        self._ended = False  # an end was taken: what comes after starts at a cut

    def __len__(self) -> int:
        if self.full:
            return self.size
        size = self.size + self._sink.tell() - self._read
        return size if self.limit is None else min(size, self.limit)

    def append(self, text: str) -> None:
        self.write(text)

    def pending(self) -> bool:
        """Whether something was written since the last take."""
        return self._sink.tell() != self._read

    def cut(self, dropped: int) -> None:
        """The raw text stops here, ``dropped`` characters more were written (and more
        may be: what is written after is counted in ``dropped``): its end is a cut."""
        with self._lock:
            self._held += self._gather()
            if not self.full:
                self.full = True
                self._empty()
            self.dropped += dropped

    def take(self, *, end: bool = False) -> str:
        """What was written since the last take, redacted and settled up to a safe cut
        (``end``: all of it, the action ended)."""
        with self._lock:
            raw = self._held + self._gather()
            if not raw:
                return ""
            after_end = self._ended
            final = end or self.full or after_end
            at = len(raw) if final else safe_cut(raw, secrets.known())
            piece, self._held = secrets.redact(raw[:at]), raw[at:]
            if piece:
                cut_end = final and (self.full or after_end)
                piece = hide_edges(piece, start=after_end, end=cut_end)
                self._settled.append(piece)
            self._ended = self._ended or end
            return piece

    def text(self) -> str:
        with self._lock:
            settled = self._settled
            if len(settled) > 1:
                settled[:] = ["".join(settled)]
            done = settled[0] if settled else ""
            new = "" if self.full else self._sink.getvalue()[self._read :]
            rest = self._held + self._kept(new, count=False)
            if not rest:
                return done
            shown = hide_edges(secrets.redact(rest), start=self._ended, end=True)
            return done + shown

    # ---- under the lock ------------------------------------------------------------------

    def _gather(self) -> str:
        """What was written since the last take, as much of it as ``limit`` keeps."""
        sink = self._sink
        if sink.tell() == self._read:
            return ""
        if self.full:  # only counted
            self.dropped += sink.tell() - self._read
            self._empty()
            return ""
        value = sink.getvalue()
        new, self._read = value[self._read :], len(value)
        kept = self._kept(new)
        if len(kept) < len(new):  # the limit was reached
            self._empty()
        return kept

    def _empty(self) -> None:
        """Past ``limit``: what the sink holds is not needed (only its size, counted)."""
        self._sink.seek(0)
        self._sink.truncate()
        self._read = 0

    def _kept(self, text: str, count: bool = True) -> str:
        """What of ``text`` (written after everything kept so far) is kept: past
        ``limit`` the raw text is cut (``count``: and the cut recorded), so that its
        redaction hides the part of a secret at the cut."""
        limit = self.limit
        if not text or (not self.full and (limit is None or self.size + len(text) <= limit)):
            if count:
                self.size += len(text)
            return text
        room = 0 if self.full else max((limit or 0) - self.size, 0)
        if count:
            self.size += room
            self.full = True
            self.dropped += len(text) - room
        return text[:room]


class Known(Protocol):
    """What ``Secrets.known()`` gives: every form (longest first), the patterns finding
    them, and the first (``starts``) and last (``ends``) ``MIN_FRAGMENT`` characters of
    their parts."""

    @property
    def forms(self) -> tuple[str, ...]: ...
    @property
    def pattern(self) -> re.Pattern[str] | None: ...
    @property
    def spaced(self) -> re.Pattern[str] | None: ...
    @property
    def ends(self) -> frozenset[str]: ...
    @property
    def starts(self) -> frozenset[str]: ...


class _Edges(NamedTuple):
    known: Known  # the secrets' compiled forms these were made from
    forms: list[str]  # every form, sorted (a text's end begins one: a bisect)
    starts: list[str]  # the first characters of each part of a form, sorted


_edges_made: list[_Edges] = []


def _edges(known: Known) -> _Edges:
    made = _edges_made[0] if _edges_made else None
    if made is None or made.known is not known:
        made = _Edges(known, sorted(known.forms), sorted(known.starts))
        _edges_made[:] = [made]
    return made


def safe_cut(text: str, known: Known) -> int:
    """How much of ``text`` (which starts where no secret is cut) may be redacted on
    its own now (``known``: ``Secrets.known()``): up to a place that no occurrence of a
    secret crosses, whole or only begun at the end, nor the part of one beside a
    ``...``. The rest waits for what is written next."""
    forms = known.forms
    if not forms:
        return len(text)
    edges = _edges(known)
    longest = len(forms[0])
    if known.spaced is not None:  # a passphrase: any run of whitespace between its words
        cut = _back(text, len(text), longest + MIN_FRAGMENT)
    else:
        cut = len(text) - _begun(text, edges.forms, longest)
    while cut > 0:
        earlier = _crossed(text, cut, known, edges, longest)
        if earlier >= cut:
            return cut
        cut = earlier
    return 0


def _begun(text: str, forms: list[str], longest: int) -> int:
    """The length of the longest end of ``text`` that a form begins with."""
    for size in range(min(longest, len(text)), 0, -1):
        end = text[len(text) - size :]
        at = bisect.bisect_left(forms, end)
        if at < len(forms) and forms[at].startswith(end):
            return size
    return 0


def _back(text: str, end: int, count: int) -> int:
    """Where the stretch of ``text`` before ``end`` holding ``count`` characters other
    than whitespace starts (a passphrase's words, however they were spaced)."""
    at = end
    while count > 0 and at > 0:
        at -= 1
        if not text[at].isspace():
            count -= 1
    return at


def _crossed(text: str, cut: int, known: Known, edges: _Edges, longest: int) -> int:
    """``cut``, or an earlier place when an occurrence of a secret crosses it or a
    ``...`` near it may have the part of one beside it."""
    if known.pattern is None:
        return cut
    match = known.pattern.match
    for start in range(max(cut - longest + 1, 0), cut):
        found = match(text, start)
        if found is not None and found.end() > cut:
            return start
    if known.spaced is not None:
        for found in known.spaced.finditer(text, _back(text, cut, 3 * longest)):
            if found.start() >= cut:
                break
            if found.end() > cut:
                return found.start()
    for mark in _MARK.finditer(text, max(cut - longest - 2 * MIN_FRAGMENT, 0)):
        if mark.start() > cut + longest:
            break
        for earlier, until in _beside_mark(text, mark, known, edges, longest):
            if earlier < cut < until:
                return earlier
    return cut


def _beside_mark(
    text: str, mark: re.Match[str], known: Known, edges: _Edges, longest: int
) -> list[tuple[int, int]]:
    """The stretches around ``mark`` that must not be cut, as (start, end): the part of
    a secret that may be beside it goes in one batch with it."""
    risks = []
    if text[max(mark.start() - MIN_FRAGMENT, 0) : mark.start()] in known.ends:
        risks.append((max(mark.start() - longest, 0), mark.end()))  # a beginning, then cut
    after = text[mark.end() : mark.end() + MIN_FRAGMENT]
    whole = len(mark.group()) >= 3 or mark.group() == "…"  # (not dots still coming)
    if whole and len(after) == MIN_FRAGMENT:
        suspicious = after in known.starts
    else:  # the mark, or what follows it, is still being written: it may begin an end
        at = bisect.bisect_left(edges.starts, after)
        suspicious = at < len(edges.starts) and edges.starts[at].startswith(after)
    if suspicious:
        risks.append((mark.start(), mark.end() + longest))
    return risks
