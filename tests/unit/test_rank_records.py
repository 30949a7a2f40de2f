"""run.json's hosts, kill switches seen and GPU binding merged from the ranks' records wave by wave:
each record is read once (the wave that wrote it), not once per later wave."""
import json
from pathlib import Path
from types import SimpleNamespace

from commbench.launch.rank_records import merge_rank_records


def _records(logs: Path, lid: int) -> None:
    (logs / f"launch-{lid}.hosts.json").write_text(json.dumps(
        {"hosts": [f"n{lid}"], "num_nodes": 1, "kill_switches_seen": {"0": {"NCCL_NVLS_ENABLE": "0"}}}))
    (logs / f"launch-{lid}.gpus.json").write_text(json.dumps({"ranks_per_gpu": 1}))


def test_each_wave_reads_only_its_own_launches(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    reads, real = [], Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: reads.append(self.name) or real(self, *a, **k))
    folder, meta, waves = SimpleNamespace(path=tmp_path), {}, 40
    for lid in range(waves):   # a long run: one launch per wave
        _records(logs, lid)
        merge_rank_records(folder, meta, [lid])
    # two records per launch, each read once: 80 reads (a rescan at every wave read 2 x 820 = 1640)
    assert len(reads) == 2 * waves, len(reads)
    assert meta["hosts"] == sorted(f"n{i}" for i in range(waves))
    assert len(meta["kill_switches_seen_by_ranks"]) == len(meta["gpu_binding"]) == waves
    full = {}
    merge_rank_records(folder, full)   # the end of a run: every launch's, once
    assert full == meta


def test_a_missing_or_damaged_record_is_passed_over(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    _records(logs, 0)
    (logs / "launch-1.hosts.json").write_text("{cut")
    (logs / "launch-2.hosts.json").write_text('{"hosts": "n2"}')
    meta = {"hosts": ["n9"]}   # a resumed run keeps the hosts it had
    merge_rank_records(SimpleNamespace(path=tmp_path), meta, [0, 1, 2, 3])
    assert meta["hosts"] == ["n0", "n9"] and list(meta["gpu_binding"]) == ["launch-0"]
