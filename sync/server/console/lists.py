"""The fleet page's lists (``/console``): each one's filter (``?<list>=``) and cursor (``?<list>-after=``),
and the links that filter or page one list keeping the others' (docs/console.md, "Filters and pages")."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar
from urllib.parse import urlencode

from edgeq.sync.server.api.http import ApiError

__all__ = ["LISTS", "MAX_FILTER", "PAGE", "Ask", "Links", "cursor_text", "links", "paged", "read_asks"]

#: rows per page of every console list
PAGE: Final = 20
#: the fleet page's lists, each with the types of its cursor's parts (its rows' sort key)
LISTS: Final[Mapping[str, tuple[tuple[type, ...], ...]]] = {
    "devices": ((str,),), "queues": ((str,),), "bridges": ((str,),), "expiries": ((int,),),
    "refusals": ((int,), (int,), (str,), (str,), (int, str)), "parked": ((int,), (int,), (str,))}
#: a filter is part of a name: no longer than a name can be
MAX_FILTER: Final = 48
_MAX_CURSOR = 400
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Ask:
    """What the page asks of one list: rows holding ``text`` ('' for all), after the row ``after`` names."""

    text: str = ""
    after: tuple[int | str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Links:
    """One list's links: ``base``, the page's query with its own cursor dropped (its first page), and the
    ``hidden`` fields its filter form carries (the other lists' filters and pages)."""

    base: str
    hidden: list[tuple[str, str]]


def read_asks(query: Mapping[str, str]) -> dict[str, Ask]:
    """Each list's :class:`Ask` from the page's query; an :class:`ApiError` (400) for a filter too long or a
    cursor that is not a page's."""
    asks = {}
    for name, shape in LISTS.items():
        text = query.get(name, "")
        if len(text) > MAX_FILTER:
            raise ApiError(400, f"the {name} filter is {len(text)} characters long: give at most "
                                f"{MAX_FILTER} (part of a name), not {text[:40]!r}…")
        asks[name] = Ask(text, _decode(name, query.get(f"{name}-after", ""), shape))
    return asks


def cursor_text(key: Sequence[int | str]) -> str:
    """A row's sort key as a page cursor (URL-safe base64 of its JSON)."""
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def _decode(name: str, text: str, shape: tuple[tuple[type, ...], ...]) -> tuple[int | str, ...] | None:
    if not text:
        return None
    try:
        if len(text) > _MAX_CURSOR:
            raise ValueError
        key = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        key = None
    if not (isinstance(key, list) and len(key) == len(shape)
            and all(type(k) in kinds for k, kinds in zip(key, shape, strict=True))):
        raise ApiError(400, f"{name}-after must be the cursor of a 'Next page' link, not {text[:40]!r}")
    return tuple(key)


def paged(rows: list[_T], key: Callable[[_T], Sequence[int | str]]) -> tuple[list[_T], str | None]:
    """A page of ``rows`` (read up to :data:`PAGE` + 1) and the next page's cursor (None: the last page)."""
    return rows[:PAGE], cursor_text(key(rows[PAGE - 1])) if len(rows) > PAGE else None


def links(query: Mapping[str, str], name: str) -> Links:
    """List ``name``'s :class:`Links` over the page's query (the lists' own parameters only: not ``done``)."""
    kept = [(k, v) for k, v in query.items()
            if v and (k in LISTS or (k.endswith("-after") and k[:-6] in LISTS)) and k != f"{name}-after"]
    return Links(f"/console?{urlencode(kept)}" if kept else "/console",
                 [(k, v) for k, v in kept if k != name])
