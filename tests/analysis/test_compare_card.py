"""``engram_eval.analysis.compare_card`` (run by ``scripts/compare_card.py``, the command the
rerank publications recorded): a retrained reranker against its published card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engram_eval.analysis.compare_card import CardComparison, compare_cards, main

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


def test_compare_cards_returns_what_the_line_says(tmp_path: Path) -> None:
    def card(pairs: str, weights: str, losses: list[float]) -> dict:
        return json.loads(_card(tmp_path / "c.json", pairs, weights, losses).read_text())

    assert compare_cards(card("p", "w", [0.7]), card("q", "w", [0.7])) == \
        CardComparison(False, [], 0.0)
    assert compare_cards(card("p", "w", [0.7]), card("p", "w", [0.1])) == \
        CardComparison(True, [], 0.0)  # the loss only matters when a file differs
    c = compare_cards(card("p", "w1", [0.7, 0.5]), card("p", "w2", [0.7, 0.5 + 3e-6]))
    assert c.same_pairs and c.differ == ["model.safetensors"]
    assert abs(c.loss_gap - 3e-6) < 1e-12


def test_module_main_matches_the_script(tmp_path: Path, capsys) -> None:
    a = _card(tmp_path / "a.json", "p", "w1", [0.7, 0.5])
    b = _card(tmp_path / "b.json", "p", "w2", [0.7, 0.5 + 2e-6])
    assert main([str(a), str(b)]) == 0
    assert capsys.readouterr().out == _run(a, b).stdout
    assert main([str(a)]) == 2
