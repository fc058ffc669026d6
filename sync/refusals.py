"""Refusals in words both ends share: a reason's short code, and the hints that say what to do
about it, and where (a queue missing on the server is defined *there*)."""

from __future__ import annotations

__all__ = ["forbidden_hint", "missing_hint", "plain_refusal", "refusal_code", "refusal_hint"]

#: Refusal reasons the server gives, by what they say (its per-message results carry no code).
_CODES = (("no-queue", "no-queue"), ("is full", "queue-full"), ("max_bytes", "queue-full"),
          ("max_message_bytes", "too-large"), ("larger than", "too-large"), ("too large", "too-large"))


def refusal_code(why: str) -> str:
    """A short code for a refusal reason: ``no-queue``, ``queue-full``, ``too-large`` or ``refused``.

    >>> refusal_code("no-queue: no queue 'METRICS' on queue manager HOME")
    'no-queue'
    """
    for needle, code in _CODES:
        if needle in why:
            return code
    return "refused"


def plain_refusal(why: str, server: str, target: str) -> str:
    """A refusal reason as the device shows it: a missing queue said for the device, any other as is.

    >>> plain_refusal("no-queue: no queue 'M' on queue manager HOME: define it with define_queue('M')",
    ...               "HOME", "M")
    'no-queue: HOME has no queue M'
    """
    return f"no-queue: {server} has no queue {target}" if refusal_code(why) == "no-queue" else why


def missing_hint(server: str, queue: str, purpose: str = "") -> str:
    """What the server's operator should do about a queue ``server`` does not have.

    >>> print(missing_hint("HOME", "METRICS"))  # doctest: +NORMALIZE_WHITESPACE
    HOME has no queue METRICS: define it on the server
    (edgeq queue define METRICS --db <the server's store>)
    """
    return (f"{server} has no queue {queue}{purpose}: define it on the server "
            f"(edgeq queue define {queue} --db <the server's store>)")


def refusal_hint(
    server: str, target: str, code: str, why: str, limit: int, *, dlq: str, refused: int = 1, moved: int = 0,
    kept: int = 0,
) -> str:
    """What happened to ``refused`` messages of a remote queue, what to do, and what happens to them.

    >>> print(refusal_hint("HOME", "M", "queue-full", "full", 3, dlq="DLQ", refused=2, moved=1))
    ... # doctest: +NORMALIZE_WHITESPACE
    HOME refused them: full; 1 refused 3 times moved to dead-letter queue DLQ (edgeq dlq resend once the
    cause is fixed); 1 stay here and are offered again, each at most 3 times before it moves to dead-letter
    queue DLQ
    """
    what = missing_hint(server, target) if code == "no-queue" else f"{server} refused them: {why}"
    said = [what]
    if moved:
        said.append(f"{moved} refused {limit} times moved to dead-letter queue {dlq} "
                    "(edgeq dlq resend once the cause is fixed)")
    if kept:
        said.append(f"{kept} refused {limit} times stay here, offered again: dead-letter queue {dlq} "
                    "could not take them (the log says why)")
    if refused > moved + kept:
        who = "they" if said == [what] else refused - moved - kept
        said.append(f"{who} stay here and are offered again, each at most {limit} times before it moves "
                    f"to dead-letter queue {dlq}")
    return "; ".join(said)


def forbidden_hint(device: str, server: str, target: str, detail: str) -> str:
    """A forbidden push: the server's reason, and where to change it."""
    return (f"{detail}: allow it on the server (edgeq server devices add {device} --public-key <its key> "
            f"--queues <its queues>,{target} --db <the server's store>), or stop putting to this queue")
