"""The one rule that gives a compared point its verdict, and the legend written from that rule.

`judge` is the only place a verdict between better, worse, unchanged and can't tell is decided;
`legend` writes the rule out for the terminal, the reports and the JSON from the same constants,
in the same order as `judge` tests them, so the printed rule cannot drift from the verdicts.
Floors beyond PLAUSIBLE_EFFECT_PCT are shown as "> 900%" (`format_floor`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .noise import MIRROR_Q

CANT_TELL = "can't tell"
# A noise floor above a 10x change: no change a real regression plausibly makes could show, so
# even a small measured change says nothing.
PLAUSIBLE_EFFECT_PCT = 900.0
MOST_REPEATS = 10   # a point that needs more repeats than this to tell is too noisy for repeats


@dataclass(frozen=True)
class Evidence:
    """What is known about one point's change: ``d`` the log ratio NEW/BASE, ``floor_log`` its
    noise floor (log units), ``p_adjusted`` after the correction for many points, ``mirrored``
    whether the change stands out of the mirror test (False: as many points, or nearly, moved as
    far the other way; only asked when a side has a single run), ``scale`` sqrt(1/R_base +
    1/R_new), ``single`` whether a side has a single run, ``known_noise`` False when neither side
    has samples or repeats (an imported table): then only the threshold can speak; ``busy_single``
    names a side that is a single run on a busy machine (run.json's machine_load), "" otherwise."""

    d: float
    floor_log: float
    p_adjusted: float
    mirrored: bool = True
    scale: float = math.sqrt(2.0)
    single: bool = False
    known_noise: bool = True
    busy_single: str = ""


# Past this log-ratio a percentage is shown as infinite (exp overflows a float near 709.8).
LOG_CAP = 700.0


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio) if log_ratio < LOG_CAP else math.inf


def format_floor(pct: float) -> str:
    """A noise floor for people: "> 900%" past the cap (its digits mean nothing), else 3 digits."""
    if pct is None or (isinstance(pct, float) and math.isnan(pct)):
        return ""
    return f"> {PLAUSIBLE_EFFECT_PCT:g}%" if pct > PLAUSIBLE_EFFECT_PCT else f"{pct:.3g}%"


def judge(ev: Evidence, threshold_pct: float, alpha: float) -> tuple[str, str, float]:
    """(verdict, why, repeats_to_tell) of one point. The rules, tested in this order (legend()):

    0. noise unknown (no samples, no repeats) -> can't tell at the threshold or more, else unchanged;
    1. floor above PLAUSIBLE_EFFECT_PCT -> can't tell (no plausible change would show);
    2. |change| >= threshold, p_adjusted < alpha, |d| >= floor, no side a single run on a busy
       machine and the mirror test passed -> better or worse (the first two failing: can't tell);
    3. |change| < threshold -> unchanged;
    4. otherwise -> can't tell (the change is within the point's noise)."""
    change_pct = _pct(ev.d)
    plausible_log = math.log1p(PLAUSIBLE_EFFECT_PCT / 100.0)
    big = abs(change_pct) >= threshold_pct
    if not ev.known_noise:
        if big:
            return CANT_TELL, (f"changed {change_pct:+.4g}% but the noise is unknown: no samples or repeats "
                               "on either side"), math.nan
        return "unchanged", "no samples or repeats: threshold only", math.nan
    if ev.floor_log > plausible_log:
        why = (f"noise floor {format_floor(_pct(ev.floor_log))}: not even a "
               f"{PLAUSIBLE_EFFECT_PCT / 100 + 1:g}x change would show")
        return CANT_TELL, why, _repeats(plausible_log, ev)
    if big and ev.p_adjusted < alpha and abs(ev.d) >= ev.floor_log:
        if ev.busy_single:
            why = (f"changed {change_pct:+.4g}%, but {ev.busy_single} is one run on a busy machine: a load "
                   "episode during that run could explain it")
            return CANT_TELL, why, 3.0
        if ev.mirrored:
            return ("worse" if ev.d > 0 else "better"), "", math.nan
        why = (f"changed {change_pct:+.4g}%, but about as many points moved as far the other way: noise "
               "the runs cannot see (a Case's whole-run state, the machine's load) could explain it")
        return CANT_TELL, why, 3.0 if ev.single else _repeats(abs(ev.d), ev)
    if not big:
        return "unchanged", "", math.nan
    why = f"changed {change_pct:+.4g}% within its noise floor of {format_floor(_pct(ev.floor_log))}"
    return CANT_TELL, why, _repeats(abs(ev.d), ev)


def _repeats(target_log: float, ev: Evidence) -> float:
    """Repeats per side (run --repeat R on both) that would bring the floor under ``target_log``:
    the floor falls as sqrt(1/R_base + 1/R_new). inf: more than MOST_REPEATS."""
    if not (target_log > 0) or not (ev.floor_log > 0):
        return math.inf
    need = max(2, math.ceil(2.0 / (target_log * ev.scale / ev.floor_log) ** 2))
    need = max(need, 3) if ev.single else need   # a whole-run state needs repeats to be seen
    return float(need) if need <= MOST_REPEATS else math.inf


def legend(threshold_pct: float, alpha: float, correction: str, tested: int) -> list[str]:
    """The rule of judge(), one line per step, in the order judge() tests them."""
    return [
        f"0. no samples and no repeats on either side (noise unknown): {CANT_TELL} at a change of "
        f"{threshold_pct:g}% or more, else unchanged;",
        f"1. noise floor above {PLAUSIBLE_EFFECT_PCT:g}% (shown as > {PLAUSIBLE_EFFECT_PCT:g}%): {CANT_TELL}, "
        "whatever the change;",
        f"2. time changed by >= {threshold_pct:g}%, p < {alpha:g} after the {correction} correction over "
        f"{tested} points, the change at least the noise floor, no side a single run on a busy machine "
        "(run.json's load; else can't tell), and it stands out of the mirror test "
        f"(at least {1 / MIRROR_Q:g} times as many points moved as far that way as the other way, counting "
        "one more): better or worse;",
        f"3. time changed by less than {threshold_pct:g}%: unchanged;",
        f"4. anything else (a change within the noise floor): {CANT_TELL}.",
    ]
