"""edgeq.sync.logs: one JSON object per line, and nothing in it for a terminal only
(uvicorn passes a coloured copy of its messages, ``color_message``, with ANSI escapes)."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from edgeq.sync.logs import JsonFormatter, setup_json_logging


def strings(value: Any) -> list[str]:
    """Every string in a decoded JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_uvicorns_coloured_copy_is_dropped_and_escapes_are_stripped() -> None:
    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "Uvicorn running on %s",
                               ("http://x",), None)
    record.color_message = "Uvicorn running on \x1b[1m%s\x1b[0m"
    record.device = "DEV\x1b[31m1\x1b[0m"  # whatever a field holds
    line = JsonFormatter().format(record)
    decoded = json.loads(line)
    assert "color_message" not in decoded
    assert decoded["msg"] == "Uvicorn running on http://x" and decoded["device"] == "DEV1"
    assert not [s for s in strings(decoded) if "\x1b" in s]


def test_a_message_with_escapes_is_logged_plain() -> None:
    record = logging.LogRecord("edgeq.sync.server", logging.WARNING, __file__, 1, "a %s word",
                               ("\x1b[32mgreen\x1b[0m",), None)
    record.n = [1, "\x1b[0m", {"k\x1b[1m": object()}]
    decoded = json.loads(JsonFormatter().format(record))
    assert decoded["msg"] == "a green word" and decoded["n"][:2] == [1, ""]
    assert not [s for s in strings(decoded) if "\x1b" in s]


def test_setup_sends_edgeq_and_uvicorn_logs_as_json_lines() -> None:
    stream = io.StringIO()
    saved = {name: (lg.handlers[:], lg.propagate, lg.level) for name in ("edgeq", "uvicorn", "uvicorn.error")
             for lg in [logging.getLogger(name)]}
    try:
        setup_json_logging("INFO", stream)
        logging.getLogger("uvicorn.error").info("Started [%d]", 7,
                                                extra={"color_message": "Started [\x1b[36m%d\x1b[0m]"})
    finally:
        for name, (handlers, propagate, level) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:], logger.propagate = handlers, propagate
            logger.setLevel(level)
    (line,) = stream.getvalue().splitlines()
    decoded = json.loads(line)
    assert (decoded["logger"], decoded["msg"]) == ("uvicorn.error", "Started [7]")
    assert "color_message" not in line and "u001b" not in line
