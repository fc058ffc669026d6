"""The API's page lengths, shared by the server (``http.py``) and its client (``client.py``), which
imports no web framework."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT"]

#: a page's length when the request names none, and the most one may ask for
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
