"""What a request costs: prices as data, and their sum.

The core knows no price list. A model prices its own requests (``Priced``: a ``price``
method; ``models.pricing`` does it for OpenAI-compatible servers with genai-prices, a
script says it runs no model), and the loop records each request's price as a ``Cost``
event. From those events ``run.cost`` is summed (``total``), a nested agent's included. A
price that is not known is ``None``, never 0: one unpriced request makes the run's cost
``None`` too (a sum that leaves a request out would read as a smaller bill than the real
one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cortex_jupyter.runtime.core.model.chunks import Usage

__all__ = ["Price", "Priced", "fmt_usd", "price_request", "total"]


@dataclass(frozen=True, slots=True)
class Price:
    """The price of one request: ``usd`` (None: not known), ``note`` saying how it was
    priced (whose prices, of which date) or why it is not known, and ``free`` naming why
    it costs nothing when it does (``"local model"``, ``"no model"``)."""

    usd: float | None
    note: str = ""
    free: str = ""


@runtime_checkable
class Priced(Protocol):
    """A model that prices its own requests: ``usage`` is what the server reported for
    one reply (None: it reported none)."""

    def price(self, usage: Usage | None) -> Price: ...


def price_request(model: Any, usage: Usage | None) -> Price:
    """The price of one request to ``model``: its own ``price``, or not known."""
    if isinstance(model, Priced):
        try:
            return model.price(usage)
        except Exception as exc:  # a model's price must not break its run
            return Price(None, f"pricing failed: {type(exc).__name__}")
    name = getattr(model, "name", type(model).__name__)
    return Price(None, f"no price is known for the model {name!r}")


def fmt_usd(usd: float | None) -> str:
    """A cost as the header shows it: ``$0.0004``, ``$1.23``; ``$?`` when not known."""
    if usd is None:
        return "$?"
    if usd == 0:
        return "$0"
    if usd >= 1:
        return f"${usd:,.2f}"
    # Two significant digits: $0.00021, $0.0035, $0.05.
    places = max(2, 1 - math.floor(math.log10(usd)))
    return "$" + f"{usd:.{places}f}".rstrip("0").rstrip(".")


def total(costs: Iterable[float | None]) -> float | None:
    """The sum of ``costs``; None when any is None."""
    out = 0.0
    for usd in costs:
        if usd is None:
            return None
        out += usd
    return out
