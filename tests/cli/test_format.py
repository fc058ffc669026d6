"""edgeq.cli.format: the click types that read option values (the parsers themselves
are covered in tests/cli/test_cli.py and tests/cli/test_cli_rules.py, and by their doctests)."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from edgeq import Int32, Int64
from edgeq.cli.format import (
    FIELD_TYPES,
    field_type,
    format_rule_spec,
    format_size,
    parse_field,
    parse_rule_spec,
    parse_size,
)
from edgeq.cli.params import (
    BYTES_LIMIT,
    DEVICE_NAME,
    DURATION,
    DURATION_LIMIT,
    EXPIRE_AT,
    FIELD,
    HOLD,
    LIMIT,
    QM_NAME,
    QUEUE_NAME,
    QUEUE_NAMES,
    RELATIVE_EXPIRY,
    RULE,
    Limit,
)


def convert(param_type: click.ParamType, *values: str) -> tuple[int, Any]:
    """Run a one-option command with ``--value`` given each of ``values``; (exit code, values or stderr)."""
    seen: list[Any] = []

    @click.command()
    @click.option("--value", type=param_type, multiple=True)
    def command(value: tuple[Any, ...]) -> None:
        seen.extend(value)

    result = CliRunner().invoke(command, [arg for v in values for arg in ("--value", v)])
    return result.exit_code, seen if result.exit_code == 0 else result.stderr


def test_values_are_parsed() -> None:
    assert convert(DURATION, "1h30m", "250ms", "0") == (0, [5_400_000, 250, 0])
    assert convert(RELATIVE_EXPIRY, "30s") == (0, [30_000])
    assert convert(EXPIRE_AT, "2025-11-21T10:00:00+01:00", "1763715600000") == (0, [1763715600000] * 2)
    assert convert(FIELD, "n:int32=5", "site=north") == (0, [("n", Int32(5)), ("site", "north")])
    assert convert(RULE, "counters", 'dead-letter:{"queue": "DLQ"}') == (
        0, [("counters", {}), ("dead-letter", {"queue": "DLQ"})]
    )


def test_limits_take_none_for_no_limit() -> None:
    assert convert(LIMIT, "1000", "none", "OFF", " unlimited ") == (0, [Limit(1000)] + [Limit(None)] * 3)
    assert convert(DURATION_LIMIT, "5m", "none") == (0, [Limit(300_000), Limit(None)])
    assert convert(DURATION_LIMIT, "1500") == (0, [Limit(1500)])  # --expiry-ms: the name says ms


@pytest.mark.parametrize(("param_type", "value", "needle"), [
    (LIMIT, "0", "'0' must be positive (or 'none' for no limit)"),
    (LIMIT, "ten", "'ten' is not a whole number (or 'none')"),
    (DURATION_LIMIT, "5 weeks", "is not a duration"),
    (RELATIVE_EXPIRY, "0", "out of range: a relative expiry is 1ms to"),
    (RELATIVE_EXPIRY, "30d", "use --expire-at for a later time"),
    (EXPIRE_AT, "2025-11-21T09:00:00", "has no timezone"),
    (FIELD, "n:int32=99999999999", "field 'n' (int32)"),
    (RULE, "dead-letter:{queue}", "is not a valid JSON object"),
    (BYTES_LIMIT, "10 apples", "'10 apples' is not a size"),
    (BYTES_LIMIT, "0", "'0' must be positive"),
    (BYTES_LIMIT, "1.5", "not a whole number of bytes"),
    (HOLD, "-1h", "is not a duration"),
    (QUEUE_NAME, "A B", "queue name 'A B' is not valid"),
    (QM_NAME, "x" * 49, "queue manager name"),
    (DEVICE_NAME, "DEV.1", "has a '.'"),
    (DEVICE_NAME, "DEV 1", "device name 'DEV 1' is not valid"),
    (QUEUE_NAMES, "A,B C", "queue name 'B C' is not valid"),
])
def test_a_bad_value_is_a_usage_error_naming_the_option(
    param_type: click.ParamType, value: str, needle: str
) -> None:
    code, stderr = convert(param_type, value)
    assert code == 2
    assert "Invalid value for '--value'" in stderr and needle in stderr


def test_sizes_holds_and_names_are_read() -> None:
    assert convert(BYTES_LIMIT, "1500", "64KiB", "1.5MB", "256mib", "1 GB", "none") == (0, [
        Limit(1500), Limit(65_536), Limit(1_500_000), Limit(268_435_456), Limit(10**9), Limit(None)])
    assert (convert(HOLD, "1h", "90s", "0", "none", "never")
            == (0, [Limit(3_600_000), Limit(90_000)] + [Limit(None)] * 3))
    assert convert(QUEUE_NAME, "DEV1.INBOX") == (0, ["DEV1.INBOX"])
    assert convert(DEVICE_NAME, "DEV-1_a") == (0, ["DEV-1_a"])
    assert convert(QUEUE_NAMES, " A , B,,", "") == (0, [["A", "B"], []])
    assert [format_size(parse_size(s)) for s in ("512", "64KiB", "256MiB", "2GiB")] == [
        "512 B", "64.0 KiB", "256.0 MiB", "2.0 GiB"]


def test_a_value_already_parsed_passes_through() -> None:
    assert LIMIT.convert(Limit(5), None, None) == Limit(5)
    assert DURATION.convert(1500, None, None) == 1500


def test_relative_expiry_reaches_the_int32_limit() -> None:
    assert convert(RELATIVE_EXPIRY, f"{2**31 - 1}ms") == (0, [2**31 - 1])
    assert convert(RELATIVE_EXPIRY, f"{2**31}ms")[0] == 2


def test_every_field_type_is_read_and_named() -> None:
    samples = {"str": ("x", "x"), "int32": ("7", Int32(7)), "int64": ("7", Int64(7)), "int": ("7", Int64(7)),
               "float": ("0.5", 0.5), "bool": ("no", False), "bytes": ("ff", b"\xff")}
    assert set(samples) == set(FIELD_TYPES)
    for kind, (text, value) in samples.items():
        name, parsed = parse_field(f"v:{kind}={text}")
        assert (name, parsed, type(parsed)) == ("v", value, type(value))
        assert field_type(value) == ("int64" if kind == "int" else kind)


def test_rule_specs_round_trip() -> None:
    for name, config in [("counters", {}), ("log", {"events": ["expired"], "level": "info"}),
                         ("my_pkg.rules:Alarm", {"url": "https://x/y?a=1"})]:
        assert parse_rule_spec(format_rule_spec(name, config)) == (name, config)
