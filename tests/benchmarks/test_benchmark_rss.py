"""The benchmarks' per-pass peak RSS is the measured process's own, not inherited from the
parent that started it (``getrusage().ru_maxrss`` survives fork + exec on Linux)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "longmemeval"
LINUX_STATUS = Path("/proc/self/status")


@pytest.fixture(scope="module")
def common():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    try:
        import _scale_common

        yield _scale_common
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.skipif(not LINUX_STATUS.is_file(), reason="needs /proc/self/status (Linux)")
def test_child_peak_excludes_the_parents_memory(common) -> None:  # type: ignore[no-untyped-def]
    held = bytearray(400 * 2**20)  # the parent holds 400 MiB, touched, when it starts the child
    for i in range(0, len(held), 4096):
        held[i] = 1
    code = "def main():\n    return len(bytearray(64 * 2**20))\n"
    out = common.measure_python(code, [])
    assert out["result"] == 64 * 2**20
    assert out["peak_rss_source"] == "VmHWM"
    # the child's own peak: its interpreter plus 64 MiB, far below the parent's 400 MiB
    assert 64 * 2**20 < out["peak_rss_bytes"] < 300 * 2**20
    del held


def test_peak_rss_snippet_reports_its_source(common) -> None:  # type: ignore[no-untyped-def]
    ns: dict = {}
    exec(common.PEAK_RSS, ns)
    rss, source = ns["_peak_rss"]()
    assert rss > 0
    assert source == ("VmHWM" if LINUX_STATUS.is_file() else "ru_maxrss")
