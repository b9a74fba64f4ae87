"""scripts/compare_card.py: a retrained reranker against its published card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_card.py"


def _card(path: Path, pairs: str, weights: str, losses: list[float]) -> Path:
    path.write_text(json.dumps({
        "pairs_sha256": pairs,
        "output_files": {"model.safetensors": weights, "config.json": "c",
                         "README.md": weights + "-wall-time"},
        "training": {"loss_curve": [{"step": i, "loss": x} for i, x in enumerate(losses)]}}))
    return path


def _run(*args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, check=False)


def test_same_files_reproduced_readme_ignored(tmp_path: Path) -> None:
    a = _card(tmp_path / "a.json", "p", "w", [0.7, 0.5])
    b = _card(tmp_path / "b.json", "p", "w", [0.7, 0.5])
    b_doc = json.loads(b.read_text())
    b_doc["output_files"]["README.md"] = "another wall time"
    b.write_text(json.dumps(b_doc))
    done = _run(a, b)
    assert done.returncode == 0 and "every file hash reproduced" in done.stdout


def test_float_noise_named_with_the_loss_gap(tmp_path: Path) -> None:
    a = _card(tmp_path / "a.json", "p", "w1", [0.7, 0.5, 0.4])
    b = _card(tmp_path / "b.json", "p", "w2", [0.7, 0.5 + 2e-6, 0.4 - 5e-6])
    done = _run(a, b)
    assert done.returncode == 0
    assert "['model.safetensors'] differ" in done.stdout and "5.00e-06" in done.stdout


def test_other_pairs_refused(tmp_path: Path) -> None:
    done = _run(_card(tmp_path / "a.json", "p", "w", [0.1]),
                _card(tmp_path / "b.json", "q", "w", [0.1]))
    assert done.returncode == 1 and "other pairs" in done.stderr


def test_usage(tmp_path: Path) -> None:
    assert _run(tmp_path / "only-one.json").returncode == 2
