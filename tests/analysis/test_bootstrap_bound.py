"""``compare --bootstrap N`` and ``report --bootstrap N`` are bounded (issue 43, "Hangs and
memory"): an N over :data:`MAX_BOOTSTRAP` is one usage error stating the bound (no
``MemoryError`` traceback), before any run is read; an N within it draws its replicates in
batches of at most :data:`BATCH_CELLS` counts, with exactly the numbers of one
``default_rng(seed).integers(0, n, size=(N, n))`` draw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from run_files import binary, write_run

from engram_eval.analysis import compare as C
from engram_eval.cli.main import main
from engram_eval.errors import ConfigError
from engram_eval.runs.reader import read_run

HUGE = "100000000"  # 10^8 replicates x 10 questions: 8 GB of draws at once before


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    a = write_run(tmp_path / "a.jsonl", binary([1, 0, 0, 1, 0, 1, 1, 0, 0, 1]))
    b = write_run(tmp_path / "b.jsonl", binary([1, 1, 0, 1, 1, 1, 1, 0, 1, 1]))
    return a, b


@pytest.mark.parametrize("n,n_boot", [(7, 5), (3, 1001), (40, 257), (1, 3)])
def test_batched_draws_are_the_one_draw(n: int, n_boot: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    idx = np.random.default_rng(11).integers(0, n, size=(n_boot, n))
    whole = np.stack([np.bincount(row, minlength=n) for row in idx]).astype(float)
    monkeypatch.setattr(C, "BATCH_CELLS", 20)  # many batches, some of one row
    parts = list(C.draw_counts(n, n_boot, 11))
    assert len(parts) > 1 or n_boot * n <= 20
    assert all(p.shape[0] * n <= max(20, n) for p in parts)
    assert np.array_equal(np.vstack(parts), whole)


def test_a_comparison_is_the_same_whatever_the_batch(runs: tuple[Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ra, rb = read_run(runs[0]), read_run(runs[1])
    one = C.compare_runs(ra, rb, n_boot=1000, seed=4)
    monkeypatch.setattr(C, "BATCH_CELLS", 64)  # 6 replicates of 10 questions a batch
    assert C.compare_runs(ra, rb, n_boot=1000, seed=4) == one


@pytest.mark.parametrize("n_boot", [C.MAX_BOOTSTRAP + 1, 10**9, 0, -5])
def test_the_library_refuses_a_count_outside_the_bound(n_boot: int,
                                                       runs: tuple[Path, Path]) -> None:
    ra, rb = read_run(runs[0]), read_run(runs[1])
    with pytest.raises(ConfigError, match="--bootstrap") as e:
        C.compare_runs(ra, rb, n_boot=n_boot)
    if n_boot > 0:
        assert f"the limit of {C.MAX_BOOTSTRAP}" in str(e.value)


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize("value", [HUGE, str(C.MAX_BOOTSTRAP + 1), "0", "-1", "1e9"])
def test_the_command_line_refuses_it_before_reading_a_run(
        command: str, value: str, runs: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.html"
    argv = ([command, str(runs[0]), str(runs[1])] if command == "compare"
            else [command, str(runs[0]), "--against", str(runs[1])])
    before = sorted(tmp_path.iterdir())
    with pytest.raises(SystemExit) as e:
        main([*argv, "--bootstrap", value, "--output", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --bootstrap:" in err and "Traceback" not in err
    if value in (HUGE, str(C.MAX_BOOTSTRAP + 1)):
        assert f"more replicates than the limit of {C.MAX_BOOTSTRAP}" in err
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_the_bound_itself_runs(runs: tuple[Path, Path], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp.json"
    assert main(["compare", str(runs[0]), str(runs[1]), "--bootstrap",
                 str(C.MAX_BOOTSTRAP), "--output", str(out), "--no-sidecar"]) == 0
    assert out.exists() and '"bootstrap": 100000' in out.read_text()
