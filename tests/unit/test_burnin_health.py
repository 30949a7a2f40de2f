"""GPU health over a burn-in's passes (analysis/burnin_health.py, the report's burn-in section): the
counters of each GPU pass by pass, and the ones that drifted with the time each moved."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from commbench.analysis import burnin, burnin_health
from commbench.runfolder.health_files import append_health

T0 = datetime(2026, 12, 7, 0, 0, tzinfo=timezone.utc).timestamp()
PASS_S = 600.0


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _gpu_record(phase, host, launch_id, t, sbe=0, dbe=0, temp=60, throttle_ms=0, gen=5):
    return {"schema": 1, "phase": phase, "host": host, "launch_id": launch_id, "attempt": 0, "gpu": 0,
            "t": t, "time_utc": _utc(t), "node_ranks": 1, "launch_hosts": [host],
            "ecc": {"aggregate_sbe": sbe, "aggregate_dbe": dbe, "volatile_sbe": sbe, "volatile_dbe": dbe},
            "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
            "throttle_ns": {"sw_thermal": 0, "hw_thermal": int(throttle_ms * 1e6), "hw_power_brake": 0},
            "pcie": {"gen": gen, "width": 16, "gen_max": 5, "width_max": 16}, "temperature_c": temp}


def _folder(tmp_path: Path, passes: int = 3) -> Path:
    """A burn-in of ``passes`` passes on n1 and n2, one launch each per pass (10 s into it, 60 s long).
    n1: single-bit errors 0 -> 0 -> 4 (within pass 2's launch), XID 79 in pass 3, hotter by 12 C in
    pass 3, thermal slowdown growing; n2: healthy and steady."""
    run = tmp_path / "burn"
    run.mkdir()
    with open(run / "results.jsonl", "w") as fh:
        for p in range(1, passes + 1):
            for host in ("n1", "n2"):
                fh.write(json.dumps({"case_id": f"c-{host}", "op": "all_reduce", "host": host, "status": "ok",
                                     "time_us": 10.0, "pass": p, "pass_utc": _utc(T0 + p * PASS_S)}) + "\n")
    n1 = {1: dict(sbe=(0, 0), temp=(60, 61), thr=(0, 0)), 2: dict(sbe=(0, 4), temp=(62, 63), thr=(0, 40)),
          3: dict(sbe=(4, 4), temp=(70, 73), thr=(40, 200))}
    for p in range(1, passes + 1):
        t = T0 + (p - 1) * PASS_S + 10
        for host, lid in (("n1", 2 * p), ("n2", 2 * p + 1)):
            f = n1[p] if host == "n1" else dict(sbe=(1, 1), temp=(55, 55), thr=(5, 5))
            recs = [_gpu_record("start", host, lid, t, sbe=f["sbe"][0], temp=f["temp"][0], throttle_ms=f["thr"][0]),
                    _gpu_record("end", host, lid, t + 60, sbe=f["sbe"][1], temp=f["temp"][1],
                                throttle_ms=f["thr"][1])]
            if host == "n1" and p == 3:
                recs.insert(1, {**recs[0], "phase": "event", "event": "xid", "xid": 79, "t": t + 30,
                                "time_utc": _utc(t + 30)})
            append_health(run, recs)
    return run


def test_each_launch_lands_in_its_pass_with_its_counters(tmp_path):
    run = _folder(tmp_path)
    table = burnin_health.health_per_pass(run, burnin.pass_rows(run))
    n1 = table[table.node == "n1"].set_index("pass")
    assert list(n1.index) == [1, 2, 3]
    assert list(n1["ecc_sbe"]) == [0, 4, 4] and list(n1["xids"]) == [0, 0, 1]
    assert list(n1["temp_max_c"]) == [61, 63, 73] and list(n1["throttled_ms"]) == [0, 40, 160]
    assert n1.loc[2, "pass_utc"] == _utc(T0 + 2 * PASS_S)


def test_drift_names_the_counters_that_moved_with_their_pass_and_time_and_leaves_the_steady_node_out(tmp_path):
    run = _folder(tmp_path)
    drift = burnin_health.health_drift(burnin_health.health_per_pass(run, burnin.pass_rows(run)))
    assert set(drift["node"]) == {"n1"}
    by = drift.set_index("counter")
    assert set(by.index) == {"ECC single-bit errors", "XID events", "highest temperature, C",
                             "time throttled, ms (thermal, power brake)"}
    sbe = by.loc["ECC single-bit errors"]
    assert (sbe["first"], sbe["last"]) == (0, 4)
    end_of_launch_2 = _utc(T0 + PASS_S + 70)
    assert sbe["moved in"] == f"pass 2 (+4, at {end_of_launch_2}; pass ended {_utc(T0 + 2 * PASS_S)})"
    assert by.loc["XID events", "moved in"].startswith(f"pass 3 (+1, at {_utc(T0 + 2 * PASS_S + 40)}")
    assert by.loc["highest temperature, C", "moved in"].startswith("pass 3 (+12,")
    assert "pass 2 (+40," in by.loc["time throttled, ms (thermal, power brake)", "moved in"]


def test_a_counter_that_grew_within_the_first_pass_is_drift_too(tmp_path):
    run = _folder(tmp_path, passes=1)
    append_health(run, [_gpu_record("start", "n2", 9, T0 + 100, dbe=0), _gpu_record("end", "n2", 9, T0 + 160, dbe=1)])
    drift = burnin_health.health_drift(burnin_health.health_per_pass(run, burnin.pass_rows(run)))
    row = drift[(drift.node == "n2") & (drift.counter == "ECC double-bit errors")]
    assert len(row) == 1 and row["moved in"].iloc[0].startswith("pass 1 (+1,")


def test_records_after_the_last_stamped_pass_are_the_pass_a_kill_cut_short(tmp_path):
    run = _folder(tmp_path)
    later = T0 + 3 * PASS_S + 50
    append_health(run, [_gpu_record("start", "n2", 20, later, sbe=1), _gpu_record("end", "n2", 20, later + 5, sbe=3)])
    table = burnin_health.health_per_pass(run, burnin.pass_rows(run))
    cut = table[(table.node == "n2") & (table["pass"] == 4)]
    assert len(cut) == 1 and cut["pass_utc"].iloc[0] == "not stamped (cut short)"


def test_the_report_s_burn_in_section_shows_the_drift(tmp_path):
    from types import SimpleNamespace

    import pandas as pd

    from commbench.analysis.report.document import Document
    from commbench.analysis.report.sections import burnin as section

    run = _folder(tmp_path)
    df = burnin.relative_time(burnin.pass_rows(run))
    doc = Document("t")
    section.health_drift(doc.section("Burn-in"), SimpleNamespace(path=run), df)
    [sub] = [i for i in doc.sections[0].items if hasattr(i, "title")]
    assert sub.title == "GPU health over the passes"
    table = next(i for i in sub.items if isinstance(i, pd.DataFrame))
    assert set(table["node"]) == {"n1"} and len(table) == 4
    empty = tmp_path / "plain"
    empty.mkdir()
    doc2 = Document("t")
    section.health_drift(doc2.section("Burn-in"), SimpleNamespace(path=empty), df)
    assert doc2.sections[0].items == []   # no health records: nothing said
