"""Structured logs: one JSON object per line, through ``logging``; a record's ``extra`` (``event``,
``device``, ...) become keys (docs/protocol.md, "Logs")."""

from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any, TextIO

__all__ = ["JsonFormatter", "setup_json_logging"]

# Attributes every LogRecord has: anything else was passed in ``extra``. uvicorn also
# passes ``color_message``, a copy of its message coloured for a terminal: never logged.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "color_message",
}
# Terminal escape sequences (CSI ones like colours, and the two-byte ones): a log line is data, not a screen.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return _ESCAPES.sub("", value).replace("\x1b", "")
    if isinstance(value, dict):
        return {_plain(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class JsonFormatter(logging.Formatter):
    """Format a record as one line of JSON: ts, level, logger, event, msg, its ``extra`` fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(_plain(out), default=lambda v: _plain(str(v)), ensure_ascii=False)


def setup_json_logging(level: int | str = logging.INFO, stream: TextIO | None = None) -> None:
    """Send edgeq's (and uvicorn's) logs to ``stream`` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("edgeq", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(level)
    logging.getLogger("uvicorn.access").disabled = True  # the server logs its own request events
