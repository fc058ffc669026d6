"""The device registry's checks, the same for ``edgeq server devices`` and the management API: a key
shared with another device, registering over a device, re-keying and changing queues."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import ManualClock, QueueManager
from edgeq.errors import DeviceExists, DeviceNotFound, InvalidArgument, KeyInUse

KEY1, KEY2, KEY3 = bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32


@pytest.fixture
def home(tmp_path: Path) -> Iterator[QueueManager]:
    with QueueManager(tmp_path / "home.db", name="HOME", clock=ManualClock(1_000_000)) as qm:
        yield qm


def test_a_key_another_device_has_is_refused_unless_shared_knowingly(home: QueueManager) -> None:
    home.register_device("DEV1", KEY1)
    home.revoke_device("DEV1")
    with pytest.raises(KeyInUse, match=r"already registered to DEV1 \(revoked 1970-01-01T00:16:40.000Z\)"):
        home.register_device("DEV2", KEY1)
    assert home.device("DEV2") is None
    assert home.register_device("DEV1", KEY1) == []  # the same device again: no sharing
    assert home.register_device("DEV2", KEY1, share_key=True) == ["DEV1"]
    assert home.device("DEV2").public_key == KEY1  # type: ignore[union-attr]


def test_registering_over_a_registered_device_is_refused_when_not_replacing(home: QueueManager) -> None:
    home.exchange.record_device("DEV1")  # only heard from: registering it is no replacement
    home.register_device("DEV1", KEY1, queues=["ORDERS"], replace=False)
    with pytest.raises(DeviceExists, match="registered already: re-key it"):
        home.register_device("DEV1", KEY2, replace=False)
    assert home.device("DEV1").public_key == KEY1  # type: ignore[union-attr]


def test_rekey_keeps_the_queues_lifts_a_revocation_and_refuses_an_unregistered_device(
        home: QueueManager) -> None:
    home.register_device("DEV1", KEY1, queues=["ORDERS"])
    home.register_device("DEV2", KEY2)
    home.revoke_device("DEV1")
    with pytest.raises(KeyInUse, match="already registered to DEV2"):
        home.exchange.rekey_device("DEV1", KEY2)
    assert home.exchange.rekey_device("DEV1", KEY3) == []
    after = home.device("DEV1")
    assert after is not None
    assert (after.public_key, after.queues, after.revoked_ms) == (KEY3, ("ORDERS",), None)
    home.exchange.record_device("DEV9")
    for name in ("DEV9", "NEVER"):  # heard from but never registered; unknown
        with pytest.raises(DeviceNotFound, match="register it first"):
            home.exchange.rekey_device(name, bytes([9]) * 32)
    with pytest.raises(InvalidArgument, match="32 raw bytes"):
        home.exchange.rekey_device("DEV1", b"short")


def test_set_queues_changes_only_the_queues_and_refuses_an_unregistered_device(home: QueueManager) -> None:
    home.register_device("DEV1", KEY1, queues=["ORDERS"])
    home.revoke_device("DEV1")
    home.exchange.set_device_queues("DEV1", ["A", "B"])
    after = home.device("DEV1")
    assert after is not None and (after.queues, after.public_key) == (("A", "B"), KEY1)
    assert after.revoked_ms is not None  # still revoked
    home.exchange.set_device_queues("DEV1", None)
    assert home.device("DEV1").queues is None  # type: ignore[union-attr]
    home.exchange.set_device_queues("DEV1", [])
    assert home.device("DEV1").queues == ()  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match="queue name"):
        home.exchange.set_device_queues("DEV1", ["bad name"])
    with pytest.raises(DeviceNotFound):
        home.exchange.set_device_queues("NEVER", ["A"])
