"""edgeq.encoding.compression: the codecs (round trips, bounded decompression: bombs refused before
the memory is spent, damaged bodies refused), whether this process can run them, and a
queue's ``compression`` attribute (define, alter, reopen, refused where it means nothing,
zstd without its package, a damaged stored value)."""

from __future__ import annotations

import sqlite3
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from edgeq import QueueManager
from edgeq.encoding.compression import (
    CODECS,
    ZSTD_MAX_WINDOW,
    BodyTooLarge,
    CorruptBody,
    available,
    check_compression,
    compress,
    decompress,
)
from edgeq.errors import InvalidArgument, StoreError

BODY = b"".join(b'{"device":"pump-%03d","t":%d.25,"ok":true}' % (i % 17, 20 + i % 9) for i in range(2000))


@pytest.fixture
def no_zstandard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as one without the zstandard package (``import zstandard`` fails)."""
    monkeypatch.setitem(sys.modules, "zstandard", None)
    yield


# -- the codecs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_round_trips_and_shrinks_a_body(codec: str) -> None:
    packed = compress(codec, BODY)  # type: ignore[arg-type]
    assert len(packed) < len(BODY) // 5
    assert decompress(codec, packed, max_bytes=len(BODY)) == BODY  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", CODECS)
def test_a_body_one_byte_over_the_limit_is_too_large(codec: str) -> None:
    packed = compress(codec, BODY)  # type: ignore[arg-type]
    with pytest.raises(BodyTooLarge, match=f"more than {len(BODY) - 1}"):
        decompress(codec, packed, max_bytes=len(BODY) - 1)  # type: ignore[arg-type]


def test_a_zlib_bomb_stops_at_the_limit() -> None:
    bomb = zlib.compress(b"\0" * (256 << 20), 9)  # 256 MiB of zeros in ~250 KB
    assert len(bomb) < 300_000
    with pytest.raises(BodyTooLarge, match="more than 1048576 bytes"):
        decompress("zlib", bomb, max_bytes=1 << 20)


def test_a_zstd_bomb_is_refused_from_its_header_before_decompressing() -> None:
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\0" * (64 << 20))
    with pytest.raises(BodyTooLarge, match=f"declares {64 << 20} bytes decompressed"):
        decompress("zstd", bomb, max_bytes=1 << 20)


def test_a_zstd_frame_that_lies_about_its_size_is_refused() -> None:
    honest = zstandard.ZstdCompressor(write_checksum=True).compress(b"x" * 100_000)
    small = zstandard.ZstdCompressor(write_checksum=True).compress(b"x" * 10)
    # The small frame's header (magic, descriptor, a 1-byte size: 10) on the large frame's
    # blocks (after its magic, descriptor and 4-byte size): 100,000 bytes that claim to be 10.
    assert (honest[4], small[4]) == (0xA4, 0x24)  # both single-segment with a checksum
    liar = small[:6] + honest[9:]
    assert zstandard.get_frame_parameters(liar).content_size == 10
    with pytest.raises(CorruptBody, match="does not decompress"):
        decompress("zstd", liar, max_bytes=1_000)


def test_a_zstd_frame_without_its_size_or_with_a_huge_window_is_refused() -> None:
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(BODY)
    with pytest.raises(CorruptBody, match="does not declare its content size"):
        decompress("zstd", unsized, max_bytes=len(BODY))
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    wide = zstandard.ZstdCompressor(compression_params=params).compress(b"y" * (ZSTD_MAX_WINDOW * 2))
    with pytest.raises(CorruptBody, match="window"):
        decompress("zstd", wide, max_bytes=1 << 30)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("damage", ["truncated", "trailing", "flipped", "garbage"])
def test_a_damaged_body_does_not_decompress(codec: str, damage: str) -> None:
    packed = compress(codec, BODY)  # type: ignore[arg-type]
    middle = len(packed) // 2
    damaged = {
        "truncated": packed[:-5],
        "trailing": packed + b"\x00",
        "flipped": packed[:middle] + bytes([packed[middle] ^ 0x55]) + packed[middle + 1 :],
        "garbage": b"\xa1av\x01 not compressed at all",
    }[damage]
    with pytest.raises(CorruptBody):
        decompress(codec, damaged, max_bytes=len(BODY) * 2)  # type: ignore[arg-type]


# -- what this process can run ------------------------------------------------------------------------


def test_zstd_is_available_with_its_package_and_preferred() -> None:
    assert available() == ("zstd", "zlib")


def test_without_zstandard_only_zlib_is_available_and_zstd_says_how_to_install(no_zstandard: None) -> None:
    assert available() == ("zlib",)
    with pytest.raises(InvalidArgument, match=r"pip install 'edgeq\[zstd\]'"):
        check_compression("zstd")
    with pytest.raises(CorruptBody, match=r"cannot decompress zstd: pip install 'edgeq\[zstd\]'"):
        decompress("zstd", b"\x28\xb5\x2f\xfd", max_bytes=10)
    assert check_compression("zlib") == "zlib"


@pytest.mark.parametrize("value", ["gzip", "ZSTD", "", 3])
def test_an_unknown_codec_is_refused_naming_the_known_ones(value: object) -> None:
    with pytest.raises(InvalidArgument, match="compression must be one of 'zstd', 'zlib' or None"):
        check_compression(value)


# -- the queue attribute ----------------------------------------------------------------------------


def test_remote_and_home_server_queues_keep_their_compression(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        qm.define_remote_queue("OUT", target_qmgr="HOME", compression="zstd")
        qm.define_home_server_queue("INBOX", server="HOME", compression="zlib")
        qm.define_remote_queue("PLAIN", target_qmgr="HOME")
        assert qm.alter_queue("PLAIN", compression="zlib").compression == "zlib"
        assert qm.alter_queue("INBOX", compression=None).compression is None
    with QueueManager(tmp_path / "d.db") as qm:
        got = {n: qm.queue_attributes(n).compression for n in ("OUT", "INBOX", "PLAIN")}
        assert got == {"OUT": "zstd", "INBOX": None, "PLAIN": "zlib"}
        assert qm.queue_attributes("OUT").as_dict()["compression"] == "zstd"


def test_compression_is_refused_on_a_local_queue(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        qm.define_queue("LOCAL")
        with pytest.raises(InvalidArgument,
                           match="compression applies to remote and home-server queues only"):
            qm.alter_queue("LOCAL", compression="zlib")
        assert qm.queue_attributes("LOCAL").compression is None


def test_zstd_on_a_queue_without_its_package_says_how_to_install(tmp_path: Path, no_zstandard: None) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        with pytest.raises(InvalidArgument,
                           match=r"needs the zstandard package.*pip install 'edgeq\[zstd\]'"):
            qm.define_remote_queue("OUT", target_qmgr="HOME", compression="zstd")
        assert qm.queue_names() == []
        qm.define_remote_queue("OUT", target_qmgr="HOME", compression="zlib")
        with pytest.raises(InvalidArgument, match="zstandard"):
            qm.alter_queue("OUT", compression="zstd")
        assert qm.queue_attributes("OUT").compression == "zlib"


def test_a_stored_codec_no_edgeq_writes_reads_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with QueueManager(path, name="DEV1") as qm:
        qm.define_remote_queue("OUT", target_qmgr="HOME", compression="zlib")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE queues SET compression = 'zlob' WHERE name = 'OUT'")
    conn.close()
    with QueueManager(path) as qm, pytest.raises(StoreError,
                                                 match=r"the store is damaged.*compression 'zlob'"):
        qm.queue_attributes("OUT")
