"""bench.report picks the newest `make bench` result, not another benchmark's JSON beside it."""

from pathlib import Path

from bench.report import latest


def test_latest_is_the_newest_dated_bench_result(tmp_path: Path):
    for name in (
        "2026-11-29-x86_64-2cpu.json",
        "2026-11-30-x86_64-2cpu.json",
        "hostile-bodies.json",
        "overload.json",
    ):
        (tmp_path / name).write_text("{}")
    assert latest(tmp_path).name == "2026-11-30-x86_64-2cpu.json"
