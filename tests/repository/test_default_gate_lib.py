"""``scripts/_default_gate_lib.sh``'s ``default_gate``, the one fit-then-measure publication
of the package's default gate that ``publish_confidence_v5.sh`` and ``publish_confidence_v6.sh``
both call: the calls it makes, with a fake ``engram-eval`` and a fake python that log their
arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
from shell_fakes import logged_calls

ROOT = Path(__file__).resolve().parents[2]


def _default_gate(tmp_path: Path, phase: str) -> list[str]:
    for part in ("lme/l.tune.json", "lme/l.heldout.json", "loc/c.tune.json",
                 "loc/c.heldout.json"):
        (tmp_path / "S" / part).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "S" / part).write_text("{}")
        (tmp_path / "S" / part.split("/")[0] / "split_manifest.json").write_text("{}")
    script = (f'set -euo pipefail\nENGRAM_EVAL="{tmp_path}/engram-eval" '
              f'PUBLISH_PYTHON="{tmp_path}/python"\n'
              f'source "{ROOT}/scripts/_publish_lib.sh"\n'
              f'source "{ROOT}/scripts/_default_gate_lib.sh"\n'
              'LME=lme.json LOCOMO=loc.json CACHE=c SCRATCH=S OUT=o CAL=cal/calibration_v9.json '
              'SETTINGS=cal/settings_v9.json CHAT_RUNS=(r/f0.jsonl.gz r/f1.jsonl.gz) '
              'HELD_CHAT_RUN=r/held.jsonl.gz COMMON=(--cache-dir c)\n'
              f'default_gate {phase}\n')
    return logged_calls(tmp_path, script)


def test_fit_runs_people_then_calibrates_on_the_given_chat_runs(tmp_path: Path) -> None:
    calls = _default_gate(tmp_path, "fit")
    runs = [c for c in calls if c.startswith("engram-eval run ")]
    assert runs == ["engram-eval run S/loc/c.tune.json --output o/locomo_tune_default.jsonl "
                    "--cache-dir c"]
    cal = [c for c in calls if c.startswith("engram-eval production calibrate-sessions ")]
    assert len(cal) == 1
    assert ("--run lme_tune=r/f0.jsonl.gz --run lme_tune=r/f1.jsonl.gz "
            "--run-data lme_tune=S/lme/l.tune.json ") in cal[0]
    assert cal[0].startswith("engram-eval production calibrate-sessions --per-shape "
                             "--feature-set v4 --run ")
    assert cal[0].endswith("--no-excerpt-retry --cache-dir c --mapping platt --calibrate-on top "
                           "--folds 5 --C 1.0 --target-precision 0.9 --shape-target people=0.7 "
                           "--min-returned 20 --output cal/calibration_v9.json "
                           "--settings-output cal/settings_v9.json "
                           "--report o/calibration_v9.report.json")
    assert calls[-1] == "python scripts/derived_sidecars.py o"


def test_measure_freezes_every_manifest_before_measuring_the_held_out_run(
        tmp_path: Path) -> None:
    calls = [c for c in _default_gate(tmp_path, "measure") if " production " in f" {c}"]
    frozen = [c for c in calls if "--validate-only" in c]
    measured = [c for c in calls if "--frozen-source" in c]
    assert len(frozen) == len(measured) == 7 and calls == frozen + measured
    assert "measure S/lme/l.heldout.json --run r/held.jsonl.gz --candidates 5" in measured[0]
    assert "fixtures/production/validation_v4.json" in measured[-1]


def test_existing_outputs_are_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "dev.json").write_text("{}")
    with pytest.raises(AssertionError, match="refusing to publish"):
        _default_gate(tmp_path, "measure")
    assert not (tmp_path / "calls").exists()
