"""Neutral scoring of exported rankings, and the public / official-layout exports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import DataError
from engram_eval.provenance.sidecar import summary_path
from engram_eval.runs.export import export_official_log, export_public
from engram_eval.scoring.score import score_rankings

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
RAW = json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def run_out(pristine: Path) -> Path:
    """The module's good run of the fixture (``pristine``, conftest.py); read only."""
    return pristine


@pytest.fixture(scope="module")
def public(run_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "public.jsonl"
    assert export_public(run_out, path) == 12
    return path


def write_lines(path: Path, objs: list) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def public_rows(public: Path) -> list[dict]:
    return [json.loads(x) for x in public.read_text(encoding="utf-8").splitlines()]


# -- score ------------------------------------------------------------------------------------
def test_score_reproduces_the_run_summary_exactly(run_out: Path, public: Path) -> None:
    summary, counts = score_rankings(public, FIXTURE)
    stored = json.loads(summary_path(run_out).read_text(encoding="utf-8"))
    assert summary["protocols"] == stored["protocols"]  # exact, floats included
    assert counts == {"questions": 12, "rankings": 12, "missing": 0,
                      "session_ids_not_in_corpus": 0, "gold_absent_from_haystack": 0}
    one, _ = score_rankings(public, FIXTURE, ["official"])
    assert one["protocols"] == {"official": stored["protocols"]["official"]}


def test_score_cli_writes_summary_and_refuses_overwrite(public: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)
    out = tmp_path / "scored.json"
    assert cli.main(["score", str(public), "--dataset", str(FIXTURE), "--output", str(out)]) == 0
    assert "missing=0" in capsys.readouterr().out
    before = out.read_bytes()
    assert cli.main(["score", str(public), "--dataset", str(FIXTURE), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {out} already exists" in err
    assert out.read_bytes() == before


def test_missing_question_scores_as_empty_and_is_counted(public: Path, tmp_path: Path) -> None:
    rows = public_rows(public)
    dropped = [r for r in rows if r["question_id"] != "lme_t01"]
    path = write_lines(tmp_path / "r.jsonl", dropped)
    summary, counts = score_rankings(path, FIXTURE)
    assert counts["missing"] == 1 and counts["rankings"] == 11 and counts["questions"] == 12
    full, _ = score_rankings(public, FIXTURE)
    for p in ("answerable", "official", "all"):
        assert summary["protocols"][p]["n"] == full["protocols"][p]["n"]  # still in the mean
    ssu = summary["protocols"]["answerable"]["by_type"]["single-session-user"]
    assert ssu["n"] == 2 and ssu["metrics"]["recall_any@50"] == 0.5  # lme_t01 scored as 0
    assert full["protocols"]["answerable"]["by_type"]["single-session-user"]["metrics"][
        "recall_any@50"] == 1.0
    with pytest.raises(DataError) as e:
        score_rankings(path, FIXTURE, strict=True)
    assert str(path) in str(e.value) and "lme_t01" in str(e.value)


@pytest.mark.parametrize(("mutate", "needles"), [
    (lambda rows: rows + [{"question_id": "lme_zz", "ranked_session_ids": []}],
     ["line 13", "question_id", "lme_zz"]),
    (lambda rows: rows + [rows[3]], ["line 13", "question_id", "duplicate", "lme_t04"]),
    (lambda rows: rows[:4] + ['{"question_id": "lme_t05", '] + rows[5:],
     ["line 5", "not valid JSON"]),
    (lambda rows: rows[:6] + [dict(rows[6], ranked_session_ids=rows[6]["ranked_session_ids"]
                                   + rows[6]["ranked_session_ids"][:1])] + rows[7:],
     ["line 7", "ranked_session_ids", "repeats", "lme_t07"]),
    (lambda rows: rows[:2] + [{"question_id": "lme_t03", "ranked_session_ids": "abc"}] + rows[3:],
     ["line 3", "ranked_session_ids"]),
    (lambda rows: rows[:2] + [{"ranked_session_ids": []}] + rows[3:], ["line 3", "question_id"]),
    (lambda rows: rows[:2] + ["[1, 2]"] + rows[3:], ["line 3", "JSON object"]),
])
def test_bad_rankings_are_rejected_naming_file_line_field(public: Path, tmp_path: Path,
                                                          mutate, needles: list[str]) -> None:
    path = write_lines(tmp_path / "bad.jsonl", mutate(public_rows(public)))
    with pytest.raises(DataError) as e:
        score_rankings(path, FIXTURE)
    msg = str(e.value)
    assert msg.startswith(str(path))
    for n in needles:
        assert n in msg, msg


def test_foreign_session_ids_are_counted(public: Path, tmp_path: Path) -> None:
    rows = public_rows(public)
    rows[0]["ranked_session_ids"] = ["not_a_session"] + rows[0]["ranked_session_ids"]
    _, counts = score_rankings(write_lines(tmp_path / "r.jsonl", rows), FIXTURE)
    assert counts["session_ids_not_in_corpus"] == 1


# -- export -----------------------------------------------------------------------------------
def test_public_export_has_no_conversation_text(public: Path) -> None:
    text = public.read_text(encoding="utf-8")
    contents = {t["content"] for q in RAW for s in q["haystack_sessions"] for t in s}
    assert len(contents) > 100
    leaked = [c for c in contents if c in text]
    assert not leaked, leaked[:3]
    for q in RAW:  # nor the questions / answers
        assert q["question"] not in text
        assert not isinstance(q["answer"], str) or len(q["answer"]) < 4 or q["answer"] not in text
    for r in public_rows(public):
        assert set(r) == {"question_id", "question_type", "ranked_session_ids", "scores"}


def test_public_export_refuses_to_overwrite(run_out: Path, public: Path) -> None:
    before = (public.read_bytes(), public.stat().st_mtime_ns)
    with pytest.raises(FileExistsError):
        export_public(run_out, public)
    assert (public.read_bytes(), public.stat().st_mtime_ns) == before


def _reference_corpus_id(sid: str, turns: list[dict]) -> str:
    """The LongMemEval reference indexer's rule, straight from the raw file."""
    if "answer" in sid and not any(t.get("has_answer") for t in turns if t["role"] == "user"):
        return sid.replace("answer", "noans")
    return sid


def _printer_style_metrics(ids: list[str], k: int) -> tuple[float, float, float]:
    """``eval_utils.evaluate_retrieval`` re-done from a log's ranked corpus ids alone: the
    ranked list is the corpus in rank order, gold = ids containing 'answer' (a set)."""
    correct = {c for c in ids if "answer" in c}
    top = set(ids[:k])
    r_any = float(any(c in top for c in correct))
    r_all = float(all(c in top for c in correct))
    rel = [1 if c in correct else 0 for c in ids]

    def dcg(r: list[int]) -> float:
        r = r[:k]
        return (r[0] + sum(x / math.log2(i) for i, x in enumerate(r[1:], start=2))) if r else 0.0

    ideal = dcg(sorted(rel, reverse=True))
    return r_any, r_all, (dcg(rel) / ideal if ideal else 0.0)


def test_official_log_layout_and_noans_relabelling(run_out: Path, tmp_path: Path) -> None:
    log = tmp_path / "official.jsonl"
    assert export_official_log(run_out, log, FIXTURE) == 12
    entries = {e["question_id"]: e for e in map(json.loads, log.read_text().splitlines())}
    run_rows = {r["question_id"]: r for r in map(json.loads, run_out.read_text().splitlines())}
    assert list(entries) == [q["question_id"] for q in RAW]
    relabelled = set()
    for q in RAW:
        qid = q["question_id"]
        e = entries[qid]
        assert e["question"] == q["question"] and e["question_date"] == q["question_date"]
        raw = dict(zip(q["haystack_session_ids"], q["haystack_sessions"], strict=True))
        n_entries = {s: q["haystack_session_ids"].count(s) for s in raw}
        items = e["retrieval_results"]["ranked_items"]
        ids = [it["corpus_id"] for it in items]
        row = run_rows[qid]
        # one item per haystack entry: a repeated session id is listed once per entry
        assert len(ids) == len(q["haystack_session_ids"])
        assert ids == [_reference_corpus_id(s, raw[s]) for s in row["ranked_session_ids"]
                       for _ in range(n_entries[s])]
        assert [it["score"] for it in items] == [
            sc for s, sc in zip(row["ranked_session_ids"], row["scores"], strict=True)
            for _ in range(n_entries[s])]
        relabelled |= {(qid, s) for s in row["ranked_session_ids"] if "noans" in
                       _reference_corpus_id(s, raw[s])}
        # every metric for every question, computed with the reference rule
        session = e["retrieval_results"]["metrics"]["session"]
        assert set(session) == {f"{m}@{k}" for m in ("recall_any", "recall_all", "ndcg_any")
                                for k in (1, 3, 5, 10, 30, 50)}
        for k in (1, 3, 5, 10, 30, 50):
            want = _printer_style_metrics(ids, k)
            got = (session[f"recall_any@{k}"], session[f"recall_all@{k}"],
                   session[f"ndcg_any@{k}"])
            assert got == pytest.approx(want, abs=1e-12), (qid, k)
        if "_abs" not in qid:
            # our official gold is the reference's correct_docs, and the row's metrics agree
            assert {c for c in ids if "answer" in c} == set(row["gold"]["official"]), qid
            assert all(row["metrics"]["official"][key] == v for key, v in session.items())
    assert relabelled == {("lme_t02", "answer_t02_1"), ("lme_t06", "answer_t06_1")}
    ids_t06 = [i["corpus_id"] for i in entries["lme_t06"]["retrieval_results"]["ranked_items"]]
    assert "noans_t06_1" in ids_t06 and "answer_t06_2" in ids_t06
    # lme_t02 has no gold: it is still carried, and scores 0 / 1 / 0
    t02 = entries["lme_t02"]["retrieval_results"]["metrics"]["session"]
    assert (t02["recall_any@5"], t02["recall_all@5"], t02["ndcg_any@5"]) == (0.0, 1.0, 0.0)
    with pytest.raises(FileExistsError):
        export_official_log(run_out, log, FIXTURE)


def test_reference_printer_on_the_official_log_prints_our_official_summary(
        run_out: Path, tmp_path: Path) -> None:
    """What ``print_retrieval_metrics.py`` does (drop ids containing ``_abs``, average
    ``metrics.session[name]`` over the rest, round to 4) gives our ``official`` figures."""
    log = tmp_path / "official.jsonl"
    export_official_log(run_out, log, FIXTURE)
    data = [json.loads(x) for x in log.read_text().splitlines()]
    data = [x for x in data if "_abs" not in x["question_id"]]
    official = json.loads(summary_path(run_out).read_text())["protocols"]["official"]
    assert official["n"] == len(data) == 10
    for name in ("recall_all@5", "ndcg_any@5", "recall_all@10", "ndcg_any@10"):
        printed = round(sum(x["retrieval_results"]["metrics"]["session"][name]
                            for x in data) / len(data), 4)
        assert printed == round(official["metrics"][name], 4), name


def test_export_cli(run_out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(k, raising=False)
    pub, log = tmp_path / "p.jsonl", tmp_path / "l.jsonl"
    assert cli.main(["export", str(run_out), "--public", str(pub), "--official-log", str(log),
                     "--dataset", str(FIXTURE)]) == 0
    assert pub.is_file() and log.is_file()
    before = pub.read_bytes()
    assert cli.main(["export", str(run_out), "--public", str(pub)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err
    assert f"{pub} already exists; refusing to overwrite" in err
    assert pub.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["l.jsonl", "p.jsonl"]  # no temp left
    assert cli.main(["export", str(run_out), "--official-log", str(tmp_path / "x")]) == 2
    assert "--dataset" in capsys.readouterr().err
