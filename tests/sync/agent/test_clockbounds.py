"""The device's bounds on the server's clock (edgeq.sync.agent.clockbounds), with injected
monotonic times: samples, drift widening, steps of the server's clock both ways, resets."""

from __future__ import annotations

import math
import random

import pytest

from edgeq.sync.agent.clockbounds import DRIFT, ServerClockBounds

T = 1_763_683_200_000  # a server clock reading, epoch ms


def test_empty_until_the_first_sample() -> None:
    bounds = ServerClockBounds()
    assert bounds.empty and bounds.age_s(5.0) is None
    with pytest.raises(ValueError, match="no sample"):
        bounds.lower(1.0)
    with pytest.raises(ValueError, match="no sample"):
        bounds.upper(1.0)
    # Without bounds, the server's reading is only known to lie inside the exchange.
    assert bounds.read_age_ms(T, 10.0, 10.25) == 250


def test_one_sample_brackets_the_server_clock_by_its_round_trip() -> None:
    bounds = ServerClockBounds()
    assert bounds.add(10.0, T, 10.25)  # sent at 10 s, answered at 10.25 s (monotonic)
    assert not bounds.empty and bounds.age_s(10.25) == 0.0 and bounds.age_s(12.25) == 2.0
    # At the answer, the server's clock had reached T and could be at most 250 ms further.
    assert bounds.lower(10.25) == T
    assert bounds.upper(10.25) == T + 251  # 250 ms, widened by 100 ppm of it (0.025 ms), rounded up
    # 10 s later it has moved by 10 s, give or take 100 ppm (1 ms) each way.
    assert bounds.lower(20.25) == T + 10_000 - 1
    assert bounds.upper(20.25) == T + 10_250 + 2  # 10,250 ms since the request left, widened 1.025 ms
    # A time before the sample is bounded too (the widening is symmetric).
    assert bounds.lower(9.25) == T - 1_000 - 1


def test_the_tightest_sample_on_each_side_is_kept() -> None:
    bounds = ServerClockBounds()
    # The server clock reads monotonic time + T (ms): exchanges of different round trips.
    assert bounds.add(1.0, T + 1_100, 1.5)  # a slow one: [T + 600, T + 1100] at 1.5 s
    assert bounds.add(2.0, T + 2_010, 2.02)  # read 10 ms after it was sent, 10 ms before the answer
    assert (bounds.lower(2.02), bounds.upper(2.02)) == (T + 2_010, T + 2_031)
    assert bounds.add(3.0, T + 3_000, 3.3)  # read at once: the best lower bound so far...
    assert bounds.lower(3.3) == T + 3_290 - 1  # ...is still the second's: T + 2,010 at 2.02 s at the latest
    assert bounds.add(4.0, T + 4_000, 4.003)  # the best on both sides now
    assert (bounds.lower(4.003), bounds.upper(4.003)) == (T + 4_000, T + 4_004)
    assert bounds.epoch == 0


def test_drift_widens_old_bounds_by_100_ppm() -> None:
    assert DRIFT == 100e-6
    bounds = ServerClockBounds()
    bounds.add(0.0, T, 0.0)  # an exact sample
    hour = 3_600.0
    assert bounds.lower(hour) == T + 3_600_000 - 360  # 100 ppm of an hour: 360 ms each way
    assert bounds.upper(hour) == T + 3_600_000 + 360
    # A server that ran 300 ppm fast for that hour is out of bounds: the bounds restart from it.
    assert not bounds.add(hour, T + 3_600_000 + 1_080, hour)
    assert bounds.epoch == 1 and bounds.lower(hour) == T + 3_601_080


@pytest.mark.parametrize("step_ms", [-600_000, -2_000, 2_000, 600_000])
def test_a_step_of_the_servers_clock_resets_the_bounds_to_the_new_sample(step_ms: int) -> None:
    bounds = ServerClockBounds()
    assert bounds.add(100.0, T, 100.01)
    assert bounds.add(110.0, T + 10_000, 110.01)
    # The server's clock steps by step_ms between two exchanges: the new reading is
    # impossible under the old bounds, so they are dropped for the new sample alone.
    assert not bounds.add(120.0, T + 20_000 + step_ms, 120.01)
    assert bounds.epoch == 1
    assert (bounds.lower(120.01), bounds.upper(120.01)) == (T + 20_000 + step_ms, T + 20_000 + step_ms + 11)
    assert bounds.add(130.0, T + 30_000 + step_ms, 130.01)  # and they go on from there
    assert bounds.epoch == 1


def test_a_disagreement_within_a_millisecond_is_not_a_step() -> None:
    """Clock readings are whole milliseconds: two honest samples may disagree by < 1 ms."""
    bounds = ServerClockBounds()
    assert bounds.add(0.0, T, 0.0)
    assert bounds.add(1.0, T + 1_001, 1.0)  # 0.9 ms above the upper bound (T + 1,000.1, widened)
    assert bounds.add(2.0, T + 2_000, 2.0)  # 0.9 ms below the lower bound the second gave
    assert bounds.epoch == 0
    assert not bounds.add(3.0, T + 3_003, 3.0)


def test_reset_forgets_everything() -> None:
    bounds = ServerClockBounds()
    bounds.add(0.0, T, 0.1)
    bounds.reset()
    assert bounds.empty and bounds.epoch == 1
    assert bounds.add(50.0, T - 99_000, 50.1)  # a first sample is never inconsistent
    assert bounds.lower(50.1) == T - 99_000


def test_read_age_uses_an_earlier_tight_sample() -> None:
    """A slow exchange whose answer was read late: a tight earlier sample shows the
    server read its clock long after the request was sent, so less time has passed."""
    bounds = ServerClockBounds()
    bounds.add(0.0, T, 0.002)  # the server clock is (about) monotonic + T
    sent, received = 100.0, 100.8
    server_read = T + 100_400  # read 400 ms after the request left, 400 ms before the answer
    bounds.add(sent, server_read, received)
    age = bounds.read_age_ms(server_read, sent, received)
    # 400 ms really; the anchor's widening (100 ppm of 100.8 s) and 1 ms of rounding on top.
    assert age == math.ceil(400 + 100.8 * 1000 * DRIFT + 1)
    assert bounds.read_age_ms(server_read, sent, received) <= 800


def test_read_age_without_a_better_sample_is_the_whole_exchange() -> None:
    bounds = ServerClockBounds()
    bounds.add(5.0, T, 5.3)
    assert bounds.read_age_ms(T, 5.0, 5.3) == 300


def test_random_exchanges_never_break_the_bounds() -> None:
    """A server clock running up to 100 ppm off the device's monotonic clock, read in whole
    ms at a random instant of each exchange of random latency: the true clock is always
    inside [lower, upper], no reset happens, and a read's age is never underestimated."""
    rng = random.Random(16)
    for _ in range(20):
        rate = 1 + rng.uniform(-DRIFT, DRIFT)
        base = rng.uniform(-1e10, 1e10)

        def server(m: float, rate: float = rate, base: float = base) -> float:
            return T + base + m * 1000 * rate

        bounds = ServerClockBounds()
        m = rng.uniform(0, 1e6)
        for _ in range(200):
            m += rng.expovariate(1 / 30)  # seconds between exchanges
            sent = m
            read = sent + rng.expovariate(1 / 0.05)
            received = read + rng.expovariate(1 / 0.05)
            reading = math.floor(server(read))
            assert bounds.add(sent, reading, received)
            assert bounds.read_age_ms(reading, sent, received) >= (received - read) * 1000
            probe = received + rng.uniform(-5, 60)
            assert bounds.lower(probe) <= server(probe)
            assert bounds.upper(probe) >= math.floor(server(probe))
            m = received
        assert bounds.epoch == 0
