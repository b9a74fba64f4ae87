"""Issue 43, "silently wrong": inputs that gave a plausible result without a word.

* A LoCoMo item whose evidence resolves to no turn (``"D99:1"``, ``"D1-3"``, ``[]``) is
  named (question id and raw evidence) in the run's warning and in its summary
  (``evidence_unresolved``), re-derived by ``verify --dataset``; a summary that drops one
  does not verify.
* A dataset record with a key given twice is one error naming the file, the record and the
  key, on the streamed (LongMemEval, plain and gzipped) and the whole-file (LoCoMo) paths;
  nothing is written.
* ``tune --folds N`` above the number of questions (or conversations) is refused, nothing
  written.
* ANSI / control characters in a question type are escaped in the printed table.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
import yaml

from engram_eval.cli import main as cli
from engram_eval.provenance.sidecar import summary_path
from engram_eval.runs import runner
from engram_eval.runs.config import RunConfig

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LOCOMO = FIXTURES / "locomo_tiny.json"
LME = FIXTURES / "longmemeval_tiny.json"
BAD_EVIDENCE = {"tiny-1:q0": ["D99:1"], "tiny-1:q1": ["D1-3"], "tiny-2:q0": []}
#: The bundled fixture's own two items whose evidence names no turn (on purpose).
FIXTURE_UNRESOLVED = {"tiny-1:q3": [], "tiny-2:q5": ["D4:1"]}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture()
def bad_locomo(tmp_path: Path) -> Path:
    data = json.loads(LOCOMO.read_text())
    for conv in data:
        for i, item in enumerate(conv["qa"]):
            qid = f"{conv['sample_id']}:q{i}"
            if qid in BAD_EVIDENCE:
                item["evidence"] = BAD_EVIDENCE[qid]
    path = tmp_path / "locomo_bad.json"
    path.write_text(json.dumps(data))
    return path


def test_unresolved_locomo_evidence_is_named(bad_locomo: Path, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.jsonl"
    with caplog.at_level(logging.WARNING):
        rc, _, err = _run(["run", str(bad_locomo), "--retriever", "dummy", "--no-progress",
                           "--output", str(out)], capsys)
    assert rc == 0, err
    warned = [r.getMessage() for r in caplog.records if "resolves to no turn" in r.getMessage()]
    assert len(warned) == 1
    for qid, ev in BAD_EVIDENCE.items():
        assert f"{qid} {ev!r}" in warned[0]
    assert "5 selected QA item(s)" in warned[0]
    summary = json.loads(summary_path(out).read_text())
    assert summary["evidence_unresolved"] == {**BAD_EVIDENCE, **FIXTURE_UNRESOLVED}
    rc, stdout, err = _run(["verify", str(out), "--dataset", str(bad_locomo)], capsys)
    assert rc == 0, stdout + err
    # a summary that hides one of them does not verify
    summary["evidence_unresolved"].pop("tiny-1:q1")
    summary_path(out).write_text(json.dumps(summary))
    rc, stdout, err = _run(["verify", str(out), "--dataset", str(bad_locomo)], capsys)
    assert rc != 0 and "evidence_unresolved" in stdout + err


def test_the_fixture_names_its_own_and_a_selection_only_its_own(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    runner.run(RunConfig(retriever="dummy", progress=False), LOCOMO, out, echo=lambda m: None)
    assert json.loads(summary_path(out).read_text())["evidence_unresolved"] == \
        FIXTURE_UNRESOLVED
    out = tmp_path / "some.jsonl"
    runner.run(RunConfig(retriever="dummy", progress=False, question_ids=("tiny-1:q0",)),
               LOCOMO, out, echo=lambda m: None)
    assert json.loads(summary_path(out).read_text())["evidence_unresolved"] == {}


def _with_duplicate(text: str, anchor: str, key_and_value: str) -> str:
    at = text.index(anchor)
    return text[:at] + key_and_value + ", " + text[at:]


@pytest.mark.parametrize("kind", ["longmemeval", "longmemeval.gz", "locomo"])
def test_duplicated_key_in_a_dataset_record(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            kind: str) -> None:
    if kind.startswith("longmemeval"):
        qid = json.loads(LME.read_text())[2]["question_id"]
        text = _with_duplicate(LME.read_text(), f'"question_id": "{qid}"',
                               '"question_type": "decoy"')  # the type, given again later
        record, field = f"question_id={qid} (index 2)", "'question_type'"
    else:
        text = _with_duplicate(LOCOMO.read_text(), '"category"', '"category": 1')
        record, field = "index 0", "'qa[0].category'"
    path = tmp_path / ("d.json.gz" if kind.endswith(".gz") else "d.json")
    path.write_bytes(gzip.compress(text.encode()) if kind.endswith(".gz") else text.encode())
    out = tmp_path / "out" / "run.jsonl"
    rc, _, err = _run(["run", str(path), "--retriever", "dummy", "--no-progress", "--output",
                       str(out)], capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"{path}: record {record}: field {field}: the key" in lines[0]
    assert "appears more than once in one object" in lines[0]
    assert not out.parent.exists()


@pytest.mark.parametrize(("dataset", "units", "folds"), [(LME, "12 cross-validation units", 13),
                                                          (LME, "12 cross-validation units", 1000),
                                                          (LOCOMO, "2 cross-validation units", 3)])
def test_tune_refuses_more_folds_than_units(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            dataset: Path, units: str, folds: int) -> None:
    run = tmp_path / "run.jsonl"
    runner.run(RunConfig(retriever="hybrid", use_dense=False, use_dense_rocchio=False,
                         progress=False, use_cache=False, rerank=False), dataset, run,
               echo=lambda m: None)
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"fusion": ["convex"], "rrf_k": [60]}))
    out = tmp_path / "chosen.yaml"
    argv = ["tune", str(run), "--grid", str(grid), "--output", str(out), "--protocol",
            "all" if dataset == LME else "locomo", "--folds", str(folds)]
    rc, _, err = _run(argv, capsys)
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert f"--folds {folds} is more than the {units}" in lines[0] and str(run) in lines[0]
    assert not out.exists() and not Path(str(out) + ".tuning.json").exists()


def test_ansi_in_a_question_type_is_escaped_in_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(LME.read_text())
    for q in data:
        q["question_type"] = "\x1b[2J\x1b[31mred\x1b[0m\x9b1m\u202eevil\nline"
    path = tmp_path / "ansi.json"
    path.write_text(json.dumps(data))
    rc, stdout, err = _run(["run", str(path), "--retriever", "dummy", "--no-progress",
                            "--output", str(tmp_path / "run.jsonl")], capsys)
    assert rc == 0, err
    assert "\\x1b[2J\\x1b[31mred\\x1b[0m\\x9b1m\\u202eevil\\nline" in stdout
    for raw in ("\x1b", "\x9b", "\u202e"):
        assert raw not in stdout + err
