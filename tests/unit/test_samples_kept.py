"""samples.csv kept to what the rows claim, read on from where the last look stopped: after every
wave of a long run only the samples appended since are parsed, not the whole file again, and the
ended passes' Cases (results.jsonl) likewise; a file replaced meanwhile is read whole."""
from commbench.runfolder import repair, samples_kept
from commbench.runfolder.writer import RunFolder

WAVES, CASES, ITERS = 30, 4, 50


def _wave(folder, w, killed=False):
    for c in range(CASES):
        cid = f"w{w}c{c}"
        folder.append_samples([{"case_id": cid, "rank": r, "host": "h", "gpu": 0, "iteration": i, "time_us": 1.5}
                               for r in range(2) for i in range(ITERS)])
        if not (killed and c == CASES - 1):   # the last Case's launch killed before its row
            folder.append_row({"case_id": cid, "status": "ok", "time_us": 1.5})


def test_each_wave_parses_only_the_samples_it_added(tmp_path, monkeypatch):
    parsed, real = [], repair.kept_samples
    monkeypatch.setattr(repair, "kept_samples", lambda data, *a: parsed.append(len(data)) or real(data, *a))
    rows_read, real_line = [], samples_kept.parse_line
    monkeypatch.setattr(samples_kept, "parse_line", lambda line: rows_read.append(1) or real_line(line))
    folder = RunFolder(tmp_path)
    folder.create(resume=False)
    for w in range(WAVES):
        _wave(folder, w)
        assert folder.keep_samples(folder.done_case_ids()) == 0
    size = (tmp_path / "samples.csv").stat().st_size
    # incremental: each sample parsed about once (a header per call); a whole-file rescan per wave
    # parsed sum(w * size / WAVES) = about WAVES / 2 times the file (15.5 x here)
    assert sum(parsed) < 1.2 * size, (sum(parsed), size)
    assert len(rows_read) == WAVES * CASES   # results.jsonl's rows, each read once (was 1860 here)


def test_a_killed_case_s_samples_still_go_and_the_file_is_then_read_on(tmp_path):
    folder = RunFolder(tmp_path)
    folder.create(resume=False)
    _wave(folder, 0)
    assert folder.keep_samples(folder.done_case_ids()) == 0
    _wave(folder, 1, killed=True)
    assert folder.keep_samples(folder.done_case_ids()) == 2 * ITERS   # the Case without a row
    text = (tmp_path / "samples.csv").read_text()
    assert "w1c3" not in text and text.count("w1c2") == 2 * ITERS
    _wave(folder, 2)
    assert folder.keep_samples(folder.done_case_ids()) == 0
    # a smaller set than the lines already checked hold: the file is read whole again
    assert folder.keep_samples({"w2c0"}) == (3 * CASES - 2) * 2 * ITERS
    assert {line.split(",")[0] for line in (tmp_path / "samples.csv").read_text().splitlines()[1:]} == {"w2c0"}


def test_a_file_replaced_under_the_keeper_is_read_whole(tmp_path):
    folder = RunFolder(tmp_path)
    folder.create(resume=False)
    _wave(folder, 0)
    assert folder.keep_samples(folder.done_case_ids()) == 0
    other = RunFolder(tmp_path)   # another writer rewrites it (a cut line dropped), then appends
    with open(tmp_path / "samples.csv", "ab") as fh:
        fh.write(b"w9c9,0,h,0,0,1")
    other.keep_samples(None)
    _wave(folder, 1, killed=True)
    assert folder.keep_samples(folder.done_case_ids()) == 2 * ITERS
    assert "w9c9" not in (tmp_path / "samples.csv").read_text()
