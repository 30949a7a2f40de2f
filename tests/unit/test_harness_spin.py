"""The harness spin's own check (spins that ended early) never fires on a spin that waited its
full time: a clock reading exactly at the deadline is not early (with float seconds it rounded to
a hair below the spin time about 4 times in 10 and the row came back `wrong`)."""
from __future__ import annotations

from types import SimpleNamespace

from commbench.families.harness import family as harness


class _Clock:
    """First reading t0, then exactly t0 + spin, then one nanosecond more per reading."""

    def __init__(self, t0_ns: int, spin_ns: int):
        self.t0, self.spin, self.reads = t0_ns, spin_ns, 0

    def perf_counter_ns(self) -> int:
        self.reads += 1
        return self.t0 if self.reads == 1 else self.t0 + self.spin + self.reads - 2

    def perf_counter(self) -> float:
        return self.perf_counter_ns() * 1e-9


def _case(size: int):
    params = {"spin_ns_per_byte": 1.0, "slow_pct": 0.0, "victim_rank": -1}
    return SimpleNamespace(op="spin", size_bytes=size, param=lambda k, d=None: params.get(k, d))


def test_a_spin_ending_exactly_at_its_deadline_is_not_early(monkeypatch):
    ctx = SimpleNamespace(world=SimpleNamespace(size=2, rank=0))
    fam = harness.FAMILY
    # 600.123456790 s since boot: float seconds put the deadline 1024 ns on a hair short
    for t0 in (600_123_456_790, 600_123_456_789, 123_456_789_012):
        state = fam.setup(_case(1024), ctx)
        monkeypatch.setattr(harness, "time", _Clock(t0, 1024))
        for _ in range(5):
            harness.time.reads = 0
            fam.run(state)
        assert fam.check(state) == 0, t0


def test_a_spin_still_waits_its_time(monkeypatch):
    ctx = SimpleNamespace(world=SimpleNamespace(size=2, rank=0))
    state = harness.FAMILY.setup(_case(4096), ctx)
    clock = _Clock(1_000_000_000, 4096)
    monkeypatch.setattr(harness, "time", clock)
    harness.FAMILY.run(state)
    assert clock.reads >= 2 and harness.FAMILY.check(state) == 0
