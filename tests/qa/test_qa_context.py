"""export-context: a finished run's top-k sessions as reader-ready context (date order, JSON
layout, reading prompt, token counts, recall from the package's own metric), its sidecar and
fingerprint, and the refusals (overwrite, another dataset, an edited export)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL

from engram_eval.data.datasets import load_questions
from engram_eval.errors import ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.qa import prompts
from engram_eval.qa.context import ContextConfig, date_order, export_context, read_context
from engram_eval.retrieval.temporal import parse_date
from engram_eval.runs.rows import scan_rows
from engram_eval.scoring.metrics import recall_all


def _export(run: Path, out: Path, k: int = 3) -> list[dict]:
    export_context(run, TINY_LONGMEMEVAL, out, ContextConfig(k), echo=lambda m: None,
                   progress=False)
    return read_context(out)[0]


def test_rows_hold_top_k_in_date_order_with_prompt_and_tokens(pristine: Path,
                                                              tmp_path: Path) -> None:
    rows = _export(pristine, tmp_path / "ctx.jsonl", k=3)
    run_rows = scan_rows(pristine).rows
    _, questions = load_questions(TINY_LONGMEMEVAL)
    by_id = {q.question_id: q for q in questions}
    assert [r["question_id"] for r in rows] == [r["question_id"] for r in run_rows]
    for row, run_row in zip(rows, run_rows, strict=True):
        q = by_id[row["question_id"]]
        assert row["retrieved_session_ids"] == run_row["ranked_session_ids"][:3]
        assert sorted(s["session_id"] for s in row["sessions"]) == sorted(
            row["retrieved_session_ids"])
        dates = [parse_date(s["date"]) for s in row["sessions"]]
        assert dates == sorted(dates)
        system, user = row["messages"]
        assert system["role"] == "system" and user["role"] == "user"
        assert f"Current date: {q.question_date}" in user["content"]
        assert f"Question: {q.question}" in user["content"]
        assert "cannot be answered" in user["content"]  # says so when it is not there
        assert "for each session" in user["content"].lower()  # notes per session first
        blocks = json.loads(user["content"].split("\n\n")[1])
        assert [b["date"] for b in blocks] == [s["date"] for s in row["sessions"]]
        assert {t["role"] for b in blocks for t in b["turns"]} <= {"user", "assistant"}
        assert "answer" not in row  # the gold answer never goes to the reader
        assert row["tokens"]["prompt"] > 0 and row["tokens"]["oracle_prompt"] > 0
        gold = row["evidence"]["gold_session_ids"]
        if q.is_abstention:
            assert gold is None and row["evidence"]["recall_all@3"] is None
        else:
            assert row["evidence"]["recall_all@3"] == recall_all(
                gold, run_row["ranked_session_ids"], 3)


def test_sidecar_names_the_run_and_k_joins_the_fingerprint(pristine: Path,
                                                           tmp_path: Path) -> None:
    _export(pristine, tmp_path / "a.jsonl", k=2)
    _export(pristine, tmp_path / "b.jsonl", k=3)
    a = json.loads(sidecar_path(tmp_path / "a.jsonl").read_text())
    b = json.loads(sidecar_path(tmp_path / "b.jsonl").read_text())
    run_meta = json.loads(sidecar_path(pristine).read_text())
    assert a["run"]["fingerprint"] == run_meta["fingerprint"]
    assert a["top_k"] == 2 and "top_k" in a["fingerprint_fields"]
    assert "layout" in a["fingerprint_fields"] and a["layout"]["name"] == prompts.LAYOUT
    assert a["fingerprint"] != b["fingerprint"]
    assert a["tokenizer"]["name"] == "all-MiniLM-L6-v2"
    assert a["tokens"]["prompt"]["n"] == 12 and {"median", "mean", "p90", "max"} <= set(
        a["tokens"]["prompt"])


def test_gzip_export_is_deterministic_and_refuses_overwrite(pristine: Path,
                                                            tmp_path: Path) -> None:
    _export(pristine, tmp_path / "a.jsonl.gz")
    _export(pristine, tmp_path / "b.jsonl.gz")
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    assert gzip.decompress((tmp_path / "a.jsonl.gz").read_bytes()).count(b"\n") == 12
    with pytest.raises(FileExistsError):
        _export(pristine, tmp_path / "a.jsonl.gz")


def test_refuses_another_dataset_and_an_edited_export(pristine: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    data = json.loads(TINY_LONGMEMEVAL.read_text())
    data[0]["question"] += "?"
    other.write_text(json.dumps(data))
    with pytest.raises(ProvenanceError, match="not the dataset of the run"):
        export_context(pristine, other, tmp_path / "x.jsonl", ContextConfig(2),
                       echo=lambda m: None, progress=False)
    out = tmp_path / "ctx.jsonl"
    _export(pristine, out)
    out.write_text(out.read_text().replace("Current date", "Today", 1))
    with pytest.raises(ProvenanceError, match="rows hash"):
        read_context(out)


def test_date_order_keeps_haystack_order_on_ties_and_puts_unparsable_last() -> None:
    from engram_eval.data.records import Session

    s = [Session("c", "2023/05/02 (Tue) 10:00", ()), Session("x", "someday", ()),
         Session("a", "2023/01/01 (Sun) 09:00", ()), Session("b", "2023/05/02 (Tue) 08:00", ())]
    assert [x.session_id for x in date_order(s, ["a", "b", "c", "x"])] == ["a", "b", "c", "x"]
