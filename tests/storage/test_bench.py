"""The storage benchmark runs (tiny size; the numbers themselves are not asserted)."""

from __future__ import annotations

from tidelog.cli import storage_bench as bench


def test_benchmark_runs_and_prints_both_ratios(tmp_path, capsys):
    assert bench.main(["--mb", "2", "--rounds", "1", "--read-kib", "256", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "append  log" in out and "raw os.write" in out
    assert "read    log" in out and "raw os.pread" in out
    assert out.count("ratio") == 2
    assert list(tmp_path.iterdir()) == []  # it cleans up after itself
