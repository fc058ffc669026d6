"""``edgeq consume``, and the assured taking ``edgeq get`` shares with it (docs/cli.md)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType

import click

from edgeq.cli.format import format_duration, parse_duration
from edgeq.cli.options import open_store, output_options, require_queue, wants_json
from edgeq.cli.params import FIELD, QUEUE_NAME, Parsed
from edgeq.cli.views import format_message, message_json
from edgeq.errors import ConfirmIdNotFound
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.queues.attributes import QueueAttributes
from edgeq.queues.backout import redelivery_delay_ms
from edgeq.types import MAX_CONFIRM_ID, FieldValue

__all__ = ["WAIT", "Stop", "consume", "fields_filter", "settle", "take", "write_out"]

#: How long one wait lasts at most before a stop asked for by a signal is noticed.
_SLICE_S = 0.25
#: How long a command stopped by a signal gets to exit before it is killed.
_GRACE_S = 5.0


def _wait(text: str) -> float:
    if text.strip().lower() in ("forever", "inf", "infinite"):
        return math.inf
    return parse_duration(text) / 1000


#: ``--wait``: a duration, or ``forever``.
WAIT = Parsed("duration|forever", _wait)


def fields_filter(fields: Sequence[tuple[str, FieldValue]]) -> dict[str, FieldValue] | None:
    """The ``--field`` options as a filter (None if none given); a name given twice is an error."""
    out: dict[str, FieldValue] = {}
    for name, value in fields:
        if name in out:
            raise click.BadParameter(f"field {name!r} is given twice", param_hint="'--field'")
        out[name] = value
    return out or None


class Stop:
    """SIGINT and SIGTERM ask the command to stop at its next step (caught in the main thread only)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._before: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def __bool__(self) -> bool:
        return self.signal is not None

    def _asked(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stop]:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._before[signum] = signal.signal(signum, self._asked)
        try:
            yield self
        finally:
            for caught, handler in self._before.items():
                signal.signal(caught, handler)

    def exit(self) -> None:
        if self.signal is not None:
            click.echo(f"Stopped by {signal.Signals(self.signal).name}.", err=True)
            sys.exit(128 + self.signal)


def take(
    qm: QueueManager, queue: str, count: int, wanted: Mapping[str, FieldValue] | None, wait: float, stop: Stop
) -> tuple[int, list[Message]]:
    """Up to ``count`` messages under a fresh confirm id, waiting in slices so a signal stops the wait."""
    confirm_id = secrets.randbelow(MAX_CONFIRM_ID) + 1
    deadline = time.monotonic() + wait
    while True:
        remaining = deadline - time.monotonic()
        got = qm.get_many(queue, count, confirm_id=confirm_id, filter=wanted,
                          wait=max(0.0, min(remaining, _SLICE_S)))
        if got or stop or remaining <= _SLICE_S:
            return confirm_id, got


def settle(qm: QueueManager, queue: str, confirm_id: int, got: Sequence[Message], *, done: bool,
           backout: bool = False) -> None:
    """Confirm what was handed out (``done``), else undo it (``backout``: the message failed)."""
    if not got:
        return
    if done:
        for result in qm.confirm_get_each(queue, [m.uid for m in got if m.uid is not None]):
            if result.status != "confirmed":
                click.echo(f"Warning: message {result.uid} was handed out but is {result.status} "
                           "(expired, or its lock was released): it may come again", err=True)
        return
    with contextlib.suppress(ConfirmIdNotFound):  # nothing left locked: released or expired meanwhile
        qm.undo(queue, confirm_id, count_backout=backout)


def _environment(queue: str, message: Message) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "EDGEQ_QUEUE": queue,
        "EDGEQ_UID": str(message.uid),
        "EDGEQ_PRIORITY": str(message.priority),
        "EDGEQ_BACKOUT_COUNT": str(message.backout_count),
        "EDGEQ_CREATED_MS": str(message.created_ms),
        "EDGEQ_FIELDS": json.dumps(message_json(message)["fields"], ensure_ascii=False),
    })
    optional = {
        "EDGEQ_CORRELATION_ID": None if message.correlation_id is None else message.correlation_id.hex(),
        "EDGEQ_REPLY_TO": message.reply_to,
        "EDGEQ_REMAINING_EXPIRY_MS": (None if message.remaining_expiry_ms is None
                                      else str(message.remaining_expiry_ms)),
    }
    for name, value in optional.items():
        if value is None:
            env.pop(name, None)  # never one inherited from edgeq's own environment
        else:
            env[name] = value
    return env


def _run(command: str, queue: str, message: Message, stop: Stop) -> int | None:
    """The command's exit status, or None if a signal stopped edgeq first (the command is stopped too)."""
    import subprocess  # here: only --exec runs commands, and `edgeq put` and `get` load this module too

    proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                            env=_environment(queue, message))
    data: bytes | None = message.data
    while True:
        try:
            proc.communicate(data, timeout=_SLICE_S)
            return proc.returncode
        except subprocess.TimeoutExpired:
            data = None  # handed over already (communicate keeps writing what is left)
            if stop:
                break
    proc.terminate()
    try:
        proc.wait(_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return None


def write_out(data: bytes) -> None:
    """Write all of ``data`` to stdout, or raise: a short write into a closed pipe is not "printed"."""
    sys.stdout.flush()
    stream = sys.stdout.buffer
    stream.flush()
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): it takes all
        stream.write(data)
        stream.flush()
        return
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _print(message: Message, as_json: bool, first: bool) -> None:
    if as_json:
        text = json.dumps(message_json(message), ensure_ascii=False)
    else:
        text = ("" if first else "\n") + format_message(message)
    write_out(f"{text}\n".encode())


@click.command()
@click.argument("queue_name", metavar="QUEUE", type=QUEUE_NAME)
@click.option("--exec", "command", metavar="CMD",
              help="Run CMD (with /bin/sh -c) for each message, the data on its stdin: exit 0 confirms the "
                   "message, any other status undoes it (one more backout; it comes again after the queue's "
                   "redelivery delay, 1s doubling to 5m by default, the messages behind it meanwhile).")
@click.option("--wait", type=WAIT, default="forever", show_default=True,
              help="Stop when no message came for this long (30s, 500ms, 2m; 0: once the queue is empty).")
@click.option("--max", "limit", type=click.IntRange(min=1), help="Stop after this many messages.")
@click.option("--field", "fields", type=FIELD, multiple=True,
              help="Take only messages with this field value (NAME=VALUE or NAME:TYPE=VALUE). Repeatable.")
@output_options
@click.pass_context
def consume(
    ctx: click.Context, queue_name: str, command: str | None, wait: float, limit: int | None,
    fields: tuple[tuple[str, FieldValue], ...], as_json: bool,
) -> None:
    """Take the messages of QUEUE one by one, as they come: print each, or run a command on each.

    CMD gets the data on stdin, the metadata in EDGEQ_* variables (docs/cli.md).

    \b
    Examples:
      edgeq --db dev.db consume ORDERS --wait 0            # print what is there, then stop
      edgeq --db dev.db consume ORDERS --json | ./ingest   # one JSON line per message, for ever
      edgeq --db dev.db consume ORDERS --exec './handle-order'

    Exit status: 0 when --wait or --max ends it; 1 on an error; 130/143 on SIGINT/SIGTERM.
    """
    use_json = wants_json(ctx, as_json)
    if command is not None and use_json:
        raise click.UsageError("--json prints the messages; with --exec the command gets them: choose one")
    if command is not None and not command.strip():
        raise click.BadParameter("give a command to run", param_hint="'--exec'")
    wanted = fields_filter(fields)
    qm = open_store(ctx)
    require_queue(qm, queue_name)
    with Stop().installed() as stop:
        count = 0
        while not stop and (limit is None or count < limit):
            confirm_id, got = take(qm, queue_name, 1, wanted, wait, stop)
            if not got:
                break
            count += 1
            if not _hand_out(qm, queue_name, confirm_id, got[0], command, use_json, count == 1, stop):
                return
    stop.exit()
    if count == 0 and command is None and not use_json:
        click.echo(f"No message came on {queue_name}{_within(wait)}.", err=True)


def _hand_out(
    qm: QueueManager, queue: str, confirm_id: int, message: Message, command: str | None, as_json: bool,
    first: bool, stop: Stop,
) -> bool:
    got = [message]
    try:
        if command is None:
            _print(message, as_json, first)
            status: int | None = 0
        else:
            status = _run(command, queue, message, stop)
    except BrokenPipeError:  # the reader hung up: hand the message back, and stop quietly
        settle(qm, queue, confirm_id, got, done=False)
        _quiet_stdout()
        return False
    except BaseException:
        settle(qm, queue, confirm_id, got, done=False)
        raise
    if status == 0:
        settle(qm, queue, confirm_id, got, done=True)
    elif status is None or stop:  # stopped by a signal (the command too, likely): not the message's fault
        settle(qm, queue, confirm_id, got, done=False)
    else:
        settle(qm, queue, confirm_id, got, done=False, backout=True)
        _failed(qm.queue_attributes(queue), message, status)
    return True


def _within(wait: float) -> str:
    return "" if math.isinf(wait) else f" within {format_duration(round(wait * 1000))}"


def _failed(attrs: QueueAttributes, message: Message, status: int) -> None:
    what = f"signal {-status}" if status < 0 else f"status {status}"
    click.echo(f"Warning: the command exited with {what} on message {message.uid}: undone "
               f"(backout {message.backout_count + 1}){_again(attrs, message)}", err=True)


def _again(attrs: QueueAttributes, message: Message) -> str:
    backouts = message.backout_count + 1
    if attrs.backout_threshold is not None and backouts >= attrs.backout_threshold:
        return f", at its backout threshold: moved to {attrs.backout_queue}"
    delay = redelivery_delay_ms(attrs.redelivery_delay_ms, attrs.max_redelivery_delay_ms, backouts)
    left = message.remaining_expiry_ms
    if delay == 0:
        return ", offered again at once"
    if left is not None and left <= delay:
        return f", not offered again before it expires (in {format_duration(left)})"
    return f", offered again in {format_duration(delay)}"


def _quiet_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
