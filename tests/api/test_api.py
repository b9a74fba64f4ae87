"""The Python face (``import engram_eval``): lazy names, and README's "Python API" example
executed as written (bm25 on the tiny fixture, into a temporary directory)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import engram_eval

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Python API\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API section holds one python example"
    assert len(blocks[0].strip().splitlines()) <= 10
    return blocks[0]


def test_import_loads_nothing_behind_the_names() -> None:
    code = ("import json, sys\nimport engram_eval\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('engram_eval'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert json.loads(proc.stdout) == ["engram_eval"]


def test_every_public_name_resolves() -> None:
    for name in engram_eval.__all__:
        assert getattr(engram_eval, name) is not None, name
        assert name in dir(engram_eval)
    with pytest.raises(AttributeError, match="no_such_name"):
        engram_eval.no_such_name  # noqa: B018


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {}
    exec(compile(readme_example(), "README.md (Python API)", "exec"), ns)
    out = ns["out"]
    assert (tmp_path / "demo.jsonl").is_file()
    finished = engram_eval.read_run(tmp_path / "demo.jsonl")
    assert finished.fingerprint == out.fingerprint  # type: ignore[attr-defined]
    # the rankings scored by score() are the run's rankings, with the same metrics
    ranked = {r["question_id"]: r["ranked_session_ids"] for r in finished.rows}
    assert ranked == ns["rankings"]
    scored = engram_eval.score(ranked, "fixtures/longmemeval_tiny.json")
    assert scored["counts"]["missing"] == 0
    assert scored["protocols"] == finished.summary["protocols"]  # type: ignore[index]
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith(out.fingerprint)  # type: ignore[attr-defined]


def test_score_refuses_unknown_ids_and_repeats() -> None:
    from engram_eval.errors import DataError

    data = ROOT / "fixtures" / "longmemeval_tiny.json"
    with pytest.raises(DataError, match="not a question of the dataset"):
        engram_eval.score({"no-such-question": ["s1"]}, data)
    q = engram_eval.load_dataset(data)[0]
    with pytest.raises(DataError, match="repeats a session id"):
        engram_eval.score({q.question_id: ["a", "a"]}, data)
    with pytest.raises(DataError, match="no ranking"):
        engram_eval.score({q.question_id: list(q.session_ids)}, data, strict=True)
