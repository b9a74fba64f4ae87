"""``engram_eval.runs.verify.verify`` and ``engram-eval verify``: a good run passes, and every kind
of tampering is caught and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs import runner
from engram_eval.runs import verify as verification

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
ROWS = "rows: every selected question exactly once"
METRICS = "per-question metrics recomputed"
SUMMARY = "summary recomputed from rows"
SOURCES = "source hashes match the installed package"
ROWS_HASH = verification.ROWS_HASH
GOLD = verification.GOLD


# ``pristine`` (a good run) and ``result`` (a private copy to tamper with): conftest.py


def checks(rep: verification.VerifyReport) -> dict[str, tuple[bool, str]]:
    """name -> (passed, detail); a check that was not run counts as not passed."""
    return {name: (status == "ok", detail) for name, status, detail in rep.checks}


def failed(rep: verification.VerifyReport) -> dict[str, str]:
    return {name: detail for name, status, detail in rep.checks if status == "FAIL"}


def not_checked(rep: verification.VerifyReport) -> dict[str, str]:
    return {name: detail for name, status, detail in rep.checks if status == "not checked"}


def lines(out: Path) -> list[bytes]:
    return out.read_bytes().splitlines(keepends=True)


def edit_json(path: Path, fn) -> None:
    obj = json.loads(path.read_text(encoding="utf-8"))
    fn(obj)
    path.write_text(json.dumps(obj, indent=2), encoding="utf-8")


def test_good_run_verifies(result: Path) -> None:
    rep = verification.verify(result, FIXTURE)
    assert rep.ok and rep.verified, rep.format()
    names = [n for n, _, _ in rep.checks]
    assert names == ["sidecar schema", "fingerprint", ROWS, ROWS_HASH, "dataset sha256",
                     verification.SELECTION, GOLD,
                     verification.FIELDS, METRICS, verification.SCORES, verification.TRACE,
                     verification.SETTINGS, SUMMARY, SOURCES]
    assert "FAIL" not in rep.format() and "not checked" not in rep.format()
    assert rep.verdict() == "VERIFIED" and rep.exit_code == 0


def test_without_the_dataset_nothing_is_verified(result: Path) -> None:
    rep = verification.verify(result)
    assert rep.ok and not rep.verified  # nothing failed, but the gold was not re-derived
    assert set(not_checked(rep)) == {"dataset sha256", verification.SELECTION, GOLD}
    assert "[not checked] dataset sha256: no --dataset given" in rep.format()
    assert rep.verdict().startswith("NOT VERIFIED") and rep.exit_code == 3


def test_edited_row_with_consistent_metrics_is_caught_by_the_rows_hash(result: Path) -> None:
    """Swap two sessions of a row and rewrite its metrics (and the summary) to match: only
    the rows hash recorded at run time can tell."""
    ls = lines(result)
    row = json.loads(ls[0])
    ids = row["ranked_session_ids"]
    gold = set(row["gold"]["answerable"])
    i = next(n for n, sid in enumerate(ids) if sid in gold)
    j = len(ids) - 1
    ids[i], ids[j] = ids[j], ids[i]
    from engram_eval.scoring import protocols as P

    for p, g in row["gold"].items():
        if g is not None:
            row["metrics"][p] = P.metrics_for_gold(p, g, ids, row.get("haystack_entries"))
    ls[0] = (json.dumps(row, ensure_ascii=False) + "\n").encode()
    result.write_bytes(b"".join(ls))
    rows = [json.loads(x) for x in lines(result)]
    fresh = runner.summarize_rows(rows, list(rows[0]["gold"]))
    edit_json(summary_path(result), lambda s: s.__setitem__("protocols", fresh["protocols"]))
    for rep in (verification.verify(result), verification.verify(result, FIXTURE)):
        bad = failed(rep)
        assert list(bad) == [ROWS_HASH], rep.format()
        assert "differs from the sidecar" in bad[ROWS_HASH]
        assert "differs from the summary" in bad[ROWS_HASH]
        assert rep.exit_code == 1


def test_edited_metric_in_a_row(result: Path) -> None:
    ls = lines(result)
    row = json.loads(ls[0])
    assert row["metrics"]["answerable"]["recall_any@5"] == 1.0
    row["metrics"]["answerable"]["recall_any@5"] = 0.5
    ls[0] = (json.dumps(row, ensure_ascii=False) + "\n").encode()
    result.write_bytes(b"".join(ls))
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert not rep.ok
    assert METRICS in bad and "lme_t01" in bad[METRICS] and "recall_any@5" in bad[METRICS]
    assert "answerable" in bad[METRICS]
    assert checks(rep)[ROWS][0] and checks(rep)["dataset sha256"][0]


def test_edited_gold_in_a_row_needs_the_dataset(result: Path) -> None:
    ls = lines(result)
    row = json.loads(ls[0])
    row["gold"]["all"] = [row["ranked_session_ids"][0], row["ranked_session_ids"][1]]
    ls[0] = (json.dumps(row, ensure_ascii=False) + "\n").encode()
    result.write_bytes(b"".join(ls))
    bad = failed(verification.verify(result, FIXTURE))
    assert GOLD in bad and "gold[all] differs from the dataset" in bad[GOLD]
    rep = verification.verify(result)  # without the dataset the edited gold is trusted
    assert GOLD not in failed(rep) and GOLD in not_checked(rep) and not rep.verified


def test_edited_ranking_that_drops_a_session(result: Path) -> None:
    ls = lines(result)
    row = json.loads(ls[3])
    row["ranked_session_ids"] = row["ranked_session_ids"][:-1]
    row["scores"] = row["scores"][:-1]
    ls[3] = (json.dumps(row, ensure_ascii=False) + "\n").encode()
    result.write_bytes(b"".join(ls))
    bad = failed(verification.verify(result, FIXTURE))
    assert GOLD in bad and "lme_t04" in bad[GOLD] and "cover the corpus" in bad[GOLD]


def test_deleted_row(result: Path) -> None:
    ls = lines(result)
    del ls[6]
    result.write_bytes(b"".join(ls))
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert ROWS in bad and "1 missing" in bad[ROWS] and "lme_t07" in bad[ROWS]
    assert SUMMARY in bad  # the stored summary no longer matches the rows


def test_duplicated_row(result: Path) -> None:
    ls = lines(result)
    result.write_bytes(b"".join(ls) + ls[2])
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert ROWS in bad and "duplicate" in bad[ROWS] and "lme_t03" in bad[ROWS]
    assert "line 13" in bad[ROWS]


def test_torn_last_line(result: Path) -> None:
    data = result.read_bytes()
    result.write_bytes(data[: len(data) - 30])
    bad = failed(verification.verify(result, FIXTURE))
    assert ROWS in bad and "torn" in bad[ROWS]


def test_changed_dataset(result: Path, tmp_path: Path) -> None:
    data = tmp_path / FIXTURE.name
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    raw[0]["answer_session_ids"] = [raw[0]["haystack_session_ids"][-1]]
    data.write_text(json.dumps(raw), encoding="utf-8")
    rep = verification.verify(result, data)
    bad = failed(rep)
    assert list(bad) == ["dataset sha256"]
    assert str(data) in bad["dataset sha256"]
    assert GOLD in not_checked(rep) and rep.exit_code == 1


def test_changed_source(result: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = verification.source_hashes

    def fake(modules):
        h = real(modules)
        h["engram_eval/scoring/metrics.py"] = "e" * 64
        return h

    monkeypatch.setattr(verification, "source_hashes", fake)
    rep = verification.verify(result, FIXTURE)
    assert failed(rep) == {SOURCES: "differ: engram_eval/scoring/metrics.py (a run published at an "
                           "earlier commit: --sources-at COMMIT)"}


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.org", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def publishing_repo(result: Path, tmp_path: Path) -> Path:
    """A git repository whose first commit holds exactly the sources the run recorded."""
    import shutil

    from engram_eval.io import package_root
    from engram_eval.provenance.sidecar import read_sidecar

    repo = tmp_path / "repo"
    for rel in read_sidecar(result)["sources"]:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(package_root() / rel, repo / rel)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "publish")
    return repo


def test_sources_at_the_publishing_commit(result: Path, publishing_repo: Path) -> None:
    commit = _git(publishing_repo, "rev-parse", "HEAD")
    rep = verification.verify(result, FIXTURE, sources_at="HEAD", repo=publishing_repo)
    assert rep.verified, rep.format()
    assert [n for n, _, _ in rep.checks][-1] == f"source hashes match git HEAD ({commit[:12]})"
    # later code changes: the installed-package view would go stale, the commit view does not
    (publishing_repo / "engram_eval/scoring/metrics.py").write_text("# changed later\n")
    _git(publishing_repo, "commit", "-q", "-am", "later change")
    later = _git(publishing_repo, "rev-parse", "HEAD")
    assert failed(verification.verify(result, FIXTURE, sources_at="HEAD", repo=publishing_repo)) == {
        f"source hashes match git HEAD ({later[:12]})": "differ: engram_eval/scoring/metrics.py"}
    assert verification.verify(result, FIXTURE, sources_at=commit[:10], repo=publishing_repo).verified


def test_sources_at_a_commit_missing_a_file(result: Path, publishing_repo: Path) -> None:
    _git(publishing_repo, "rm", "-q", "engram_eval/runs/rows.py")
    _git(publishing_repo, "commit", "-q", "-m", "drop")
    bad = failed(verification.verify(result, FIXTURE, sources_at="HEAD", repo=publishing_repo))
    assert list(bad.values()) == ["absent: engram_eval/runs/rows.py"]


@pytest.mark.parametrize("rev", ["no-such-revision", "HEAD~5"])
def test_sources_at_an_unknown_revision(result: Path, publishing_repo: Path, rev: str) -> None:
    rep = verification.verify(result, FIXTURE, sources_at=rev, repo=publishing_repo)
    (name, detail), = failed(rep).items()
    assert name == f"source hashes match git {rev}" and "rev-parse" in detail
    assert rep.exit_code == 1


def test_sources_at_outside_a_git_checkout(result: Path, tmp_path: Path) -> None:
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    (name, detail), = failed(verification.verify(result, FIXTURE, sources_at="HEAD",
                                          repo=plain)).items()
    assert name == "source hashes match git HEAD" and str(plain) in detail


def test_cli_sources_at(result: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    seen = {}
    real = verification.verify

    def spy(res, dataset=None, *, sources_at=None, repo=None):
        seen["sources_at"] = sources_at
        return real(res, dataset, sources_at=sources_at, repo=repo)

    monkeypatch.setattr(verification, "verify", spy)
    code = cli.main(["verify", str(result), "--dataset", str(FIXTURE), "--sources-at",
                     "no-such-revision"])
    assert seen == {"sources_at": "no-such-revision"}
    assert code == 1 and "[FAIL] source hashes match git no-such-revision" in capsys.readouterr().out


def test_edited_summary_value(result: Path) -> None:
    edit_json(summary_path(result),
              lambda s: s["protocols"]["official"]["metrics"].__setitem__("recall_any@1", 0.99))
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert list(bad) == [SUMMARY]
    assert "protocols.official.metrics.recall_any@1" in bad[SUMMARY]


def test_edited_summary_denominator(result: Path) -> None:
    edit_json(summary_path(result), lambda s: s["protocols"]["answerable"].__setitem__("n", 12))
    bad = failed(verification.verify(result, FIXTURE))
    assert list(bad) == [SUMMARY] and "protocols.answerable.n" in bad[SUMMARY]


def test_missing_summary(result: Path) -> None:
    summary_path(result).unlink()
    bad = failed(verification.verify(result, FIXTURE))
    assert list(bad) == [SUMMARY] and "missing" in bad[SUMMARY]


def test_edited_sidecar_field_breaks_fingerprint(result: Path) -> None:
    edit_json(sidecar_path(result), lambda m: m["config"].__setitem__("bm25_k1", 1.2))
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert list(bad) == ["fingerprint"]
    assert "recomputed" in bad["fingerprint"]


def test_sidecar_that_breaks_the_schema(result: Path) -> None:
    edit_json(sidecar_path(result), lambda m: m.__setitem__("confidence_filter", True))
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert list(bad) == ["sidecar schema"] and "confidence_filter" in bad["sidecar schema"]


def test_missing_sidecar(result: Path) -> None:
    sidecar_path(result).unlink()
    bad = failed(verification.verify(result, FIXTURE))
    assert list(bad) == ["sidecar schema"] and "missing" in bad["sidecar schema"]


def test_cli_verify_exit_codes(result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(result), "--dataset", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "VERIFIED" in out and "NOT VERIFIED" not in out
    fp = json.loads(sidecar_path(result).read_text(encoding="utf-8"))["fingerprint"]
    assert f"fingerprint {fp}" in out and "protocol=answerable  n=10" in out

    ls = lines(result)
    assert cli.main(["verify", str(result)]) == 3
    out = capsys.readouterr().out
    assert "NOT VERIFIED" in out and "\nVERIFIED" not in out
    assert "[not checked] dataset sha256" in out and f"[not checked] {GOLD}" in out

    ls = lines(result)
    result.write_bytes(b"".join(ls[:-1]))
    assert cli.main(["verify", str(result), "--dataset", str(FIXTURE)]) == 1
    out = capsys.readouterr().out
    assert "NOT VERIFIED" in out and f"[FAIL] {ROWS}" in out


@pytest.mark.parametrize(("key", "value"), [
    ("retriever", "hybrid"), ("n_questions", 500), ("dataset_sha256", "0" * 64),
    ("dataset", "longmemeval_s_cleaned.json"), ("fingerprint", "1" * 64),
])
def test_edited_summary_header(result: Path, key: str, value: object) -> None:
    edit_json(summary_path(result), lambda s: s.__setitem__(key, value))
    bad = failed(verification.verify(result, FIXTURE))
    assert list(bad) == [SUMMARY] and key in bad[SUMMARY]


# --------------------------------------------------------------------------- issue 28, item 3
# Every row field that derives from the dataset or the run is re-derived and compared, and a
# key no writer of the package produces is refused, in rows, summaries and sidecars.
FIELDS = verification.FIELDS
TRACE = verification.TRACE


def rewrite_row(out: Path, qid: str, fn) -> None:
    """Apply ``fn`` to the row of ``qid`` (the rows hash then fails too: a forger who also
    rewrites the hashes is what the checks below catch)."""
    ls = lines(out)
    for n, raw in enumerate(ls):
        row = json.loads(raw)
        if row["question_id"] == qid:
            fn(row)
            ls[n] = (json.dumps(row, ensure_ascii=False) + "\n").encode()
    out.write_bytes(b"".join(ls))


@pytest.fixture(scope="module")
def hybrid_pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the hybrid pipeline (lexical signals only, no model): full traces, one
    question (lme_t08) with a time window, one (lme_t09) with a repeated haystack entry."""
    from engram_eval.runs.config import RunConfig

    out = tmp_path_factory.mktemp("hybrid") / "bm25.jsonl"
    runner.run(RunConfig(retriever="bm25", rerank=False, progress=False), FIXTURE, out,
               echo=lambda m: None)
    return out


@pytest.fixture
def hybrid(hybrid_pristine: Path, tmp_path: Path) -> Path:
    from run_files import copy_run

    return copy_run(hybrid_pristine, tmp_path / "bm25.jsonl")


def test_a_good_hybrid_run_verifies_with_its_traces(hybrid: Path) -> None:
    rep = verification.verify(hybrid, FIXTURE)
    assert rep.verified, rep.format()
    assert checks(rep)[TRACE] == (True, "")
    assert checks(verification.verify(hybrid))[TRACE][0]  # without the dataset too


@pytest.mark.parametrize(("field", "value", "needs_dataset"), [
    ("question_type", "multi-session", True),
    ("question_date", "2020/01/01 (Wed) 00:00", True),
    ("n_sessions", 11, False),
])
def test_a_row_field_the_dataset_gives_is_compared(result: Path, field: str, value: object,
                                                   needs_dataset: bool) -> None:
    rewrite_row(result, "lme_t02", lambda r: r.__setitem__(field, value))
    bad = failed(verification.verify(result, FIXTURE))
    assert FIELDS in bad, bad
    assert str(result) in bad[FIELDS] and "question 'lme_t02'" in bad[FIELDS]
    assert f"field {field!r}" in bad[FIELDS]
    assert (FIELDS in failed(verification.verify(result))) is not needs_dataset


@pytest.mark.parametrize(("edit", "named"), [
    (lambda r: r.__setitem__("verified_by", "me"), "'verified_by'"),
    (lambda r: r["trace"].__setitem__("note", 1), "'trace.note'"),
    (lambda r: r["timing"].__setitem__("cpu", 1.0), "'timing.cpu'"),
    (lambda r: r.pop("question_date"), "'question_date': missing"),
    (lambda r: (r["gold"].__setitem__("locomo", []), r["metrics"].__setitem__("locomo", None)),
     "field 'gold': keyed by"),
    (lambda r: r.__setitem__("timing", {"seconds": -1}), "'timing'"),
])
def test_unknown_or_missing_row_keys_are_refused(result: Path, edit, named: str) -> None:
    rewrite_row(result, "lme_t05", edit)
    for rep in (verification.verify(result, FIXTURE), verification.verify(result)):
        bad = failed(rep)
        assert FIELDS in bad and named in bad[FIELDS] and "lme_t05" in bad[FIELDS], rep.format()


def test_unknown_summary_key_is_refused(result: Path) -> None:
    edit_json(summary_path(result), lambda s: s.__setitem__("verified", True))
    bad = failed(verification.verify(result, FIXTURE))
    assert list(bad) == [SUMMARY] and "summary field 'verified'" in bad[SUMMARY]


def test_summary_frozen_source_must_be_the_sidecars(result: Path) -> None:
    edit_json(summary_path(result), lambda s: s.__setitem__("frozen_source", {"label": "x"}))
    bad = failed(verification.verify(result, FIXTURE))
    assert list(bad) == [SUMMARY] and "frozen_source" in bad[SUMMARY]


@pytest.mark.parametrize(("edit", "named", "fingerprinted"), [
    (lambda m: m.__setitem__("audited_by", "x"), "'audited_by'", False),
    (lambda m: m["dataset"].__setitem__("url", "x"), "'dataset.url'", False),
    (lambda m: m["selection"].__setitem__("note", "x"), "'selection.note'", True),
    (lambda m: m["environment"].__setitem__("gpu", "x"), "'environment.gpu'", False),
    (lambda m: m["runs"][0].__setitem__("approved", True), "'runs[0].approved'", False),
    (lambda m: m["config_recorded"].__setitem__("secret_mode", 1),
     "'config_recorded.secret_mode'", False),
    (lambda m: m["packages"].__setitem__("left-pad", "1.0"), "'packages.left-pad'", True),
    (lambda m: m["models"].append({"role": "x", "name": "x", "source": "x", "revision": "x",
                                   "files_sha256": {}, "sha256": "0" * 64, "licence": "x"}),
     "'models[0].licence'", True),
    (lambda m: m.__setitem__("fingerprint_fields", ["dataset"]), "'fingerprint_fields'", False),
])
def test_unknown_sidecar_keys_are_refused(result: Path, edit, named: str,
                                          fingerprinted: bool) -> None:
    edit_json(sidecar_path(result), edit)
    rep = verification.verify(result, FIXTURE)
    bad = failed(rep)
    assert "sidecar schema" in bad and named in bad["sidecar schema"], rep.format()
    assert str(sidecar_path(result)) in bad["sidecar schema"]
    # outside the fingerprint only the allow-list can tell
    assert ("fingerprint" in bad) is fingerprinted


def swap_corpus_index(traces: list[dict]) -> None:
    """The first two traces claim each other's haystack position."""
    a, b = traces[0]["corpus_index"], traces[1]["corpus_index"]
    traces[0]["corpus_index"], traces[1]["corpus_index"] = b, a


@pytest.mark.parametrize(("qid", "edit", "named", "needs_dataset"), [
    ("lme_t08", lambda r: r["trace"]["question"].update(temporal_status="no_expression",
                                                        time_window=None),
     "trace.question.temporal_status", True),
    ("lme_t01", lambda r: r["trace"]["question"].__setitem__("chat_roles", False),
     "trace.question.chat_roles", True),
    ("lme_t03", lambda r: swap_corpus_index(r["trace"]["sessions"]),
     "trace.sessions[0].corpus_index", True),
    ("lme_t04", lambda r: r["trace"]["sessions"][2].__setitem__("final_score", 99.0),
     "trace.sessions[2].final_score", False),
    ("lme_t04", lambda r: r["trace"].__setitem__("sessions", r["trace"]["sessions"][:3]),
     "'trace.sessions': 3 traces", False),
    ("lme_t06", lambda r: r["trace"]["sessions"][0].__setitem__("fused_rank", 0),
     "trace.sessions[0].fused_rank", False),
    ("lme_t06", lambda r: r["trace"]["sessions"][1].__setitem__("reranked", True),
     "trace.sessions[1].reranked", False),
    ("lme_t06", lambda r: r["trace"]["sessions"][0].__setitem__("temporal", 1.25),
     "trace.sessions[0].temporal", False),
])
def test_forged_traces_are_caught(hybrid: Path, qid: str, edit, named: str,
                                  needs_dataset: bool) -> None:
    rewrite_row(hybrid, qid, edit)
    rep = verification.verify(hybrid, FIXTURE)
    bad = failed(rep)
    assert TRACE in bad and named in bad[TRACE] and f"question {qid!r}" in bad[TRACE], \
        rep.format()
    assert str(hybrid) in bad[TRACE]
    assert (TRACE in failed(verification.verify(hybrid))) is not needs_dataset


def test_a_flipped_in_window_is_caught_even_with_a_consistent_multiplier(hybrid: Path) -> None:
    def flip(r: dict) -> None:
        t = next(t for t in r["trace"]["sessions"] if t["in_window"] is False)
        t["in_window"], t["temporal"] = True, r["trace"]["question"]["temporal_boost"]

    rewrite_row(hybrid, "lme_t08", flip)
    bad = failed(verification.verify(hybrid, FIXTURE))
    assert TRACE in bad and ".in_window': True; the session's date" in bad[TRACE]


def test_replaced_question_texts_are_applied_or_the_window_is_not_rederived(
        tmp_path: Path) -> None:
    """A run that replaced question texts: its time windows come from the file's texts, so
    verify re-derives them only with that file (and says so without it)."""
    from engram_eval.runs.config import RunConfig

    zh = ROOT / "fixtures" / "longmemeval_tiny.questions_zh.jsonl"
    out = tmp_path / "zh.jsonl"
    runner.run(RunConfig(retriever="bm25", rerank=False, progress=False, questions=str(zh)),
               FIXTURE, out, echo=lambda m: None)
    assert verification.verify(out, FIXTURE, questions_file=zh).verified
    rep = verification.verify(out, FIXTURE)
    assert rep.ok and "time windows not re-derived" in checks(rep)[TRACE][1]
    # what could not be checked is said, and the run is not VERIFIED (issue 43)
    assert list(not_checked(rep)) == [verification.TEXTS] and rep.exit_code == 3


def test_resume_refuses_a_kept_row_with_a_forged_trace(hybrid: Path) -> None:
    from engram_eval.errors import ProvenanceError
    from engram_eval.runs.config import RunConfig

    rewrite_row(hybrid, "lme_t02", lambda r: r["trace"]["sessions"][0].__setitem__(
        "final_score", 42.0))
    hybrid.write_bytes(b"".join(lines(hybrid)[:4]))  # an interrupted run
    before = hybrid.read_bytes()
    with pytest.raises(ProvenanceError, match=r"line 2 \(question 'lme_t02'\) fails the check "
                       r"'traces agree.*field 'trace.sessions\[0\].final_score'"):
        runner.run(RunConfig(retriever="bm25", rerank=False, progress=False), FIXTURE, hybrid,
                   resume=True, echo=lambda m: None)
    assert hybrid.read_bytes() == before


def test_resume_refuses_an_unknown_sidecar_key(hybrid: Path) -> None:
    from engram_eval.errors import ProvenanceError
    from engram_eval.runs.config import RunConfig

    edit_json(sidecar_path(hybrid), lambda m: m.__setitem__("approved", True))
    hybrid.write_bytes(b"".join(lines(hybrid)[:4]))
    with pytest.raises(ProvenanceError, match="field 'approved' is not one engram-eval writes"):
        runner.run(RunConfig(retriever="bm25", rerank=False, progress=False), FIXTURE, hybrid,
                   resume=True, echo=lambda m: None)


def test_every_key_the_writers_produce_is_in_the_allow_lists(tmp_path: Path) -> None:
    """Fresh, resumed, sharded and merged runs and a run with replaced question texts: every
    row, summary and sidecar key is in its writer's allow-list, and every row field listed is
    written (the list holds nothing stale)."""
    from engram_eval.provenance import sidecar as S
    from engram_eval.runs import known_fields as K
    from engram_eval.runs.config import RunConfig
    from engram_eval.runs.merge import merge
    from engram_eval.runs.rows import ROW_FIELDS, TIMING_FIELDS, TRACE_FIELDS
    from engram_eval.scoring.summary import SUMMARY_FIELDS

    def cfg(**kw: object) -> RunConfig:
        return RunConfig(retriever="bm25", rerank=False, progress=False, **kw)  # type: ignore[arg-type]

    zh = ROOT / "fixtures" / "longmemeval_tiny.questions_zh.jsonl"
    outs = []
    for name, kw in (("fresh", {}), ("zh", {"questions": str(zh)}),
                     ("s0", {"shard": "0/2"}), ("s1", {"shard": "1/2"})):
        out = tmp_path / f"{name}.jsonl"
        runner.run(cfg(**kw), FIXTURE, out, echo=lambda m: None)
        outs.append(out)
    resumed = tmp_path / "resumed.jsonl"
    runner.run(cfg(), FIXTURE, resumed, echo=lambda m: None)
    resumed.write_bytes(b"".join(lines(resumed)[:5]))
    runner.run(cfg(), FIXTURE, resumed, resume=True, echo=lambda m: None)
    merged = tmp_path / "merged.jsonl"
    merge(outs[2:], merged, dataset=FIXTURE)
    row_keys: set[str] = set()
    for out in [*outs, resumed, merged]:
        meta = json.loads(sidecar_path(out).read_text())
        summary = json.loads(summary_path(out).read_text())
        assert K.sidecar_problems(meta) == [], out
        assert K.summary_unknown_fields(summary) == [] and set(summary) <= set(SUMMARY_FIELDS)
        for raw in lines(out):
            row = json.loads(raw)
            assert K.row_unknown_fields(row) == [], (out, row["question_id"])
            assert set(row["trace"]) == set(TRACE_FIELDS)
            # wall seconds; the HTTP counts (the rest of TIMING_FIELDS) are written by a
            # system behind HTTP (tests/retrieval/test_http_system.py checks every one)
            assert set(row["timing"]) == {"seconds"} and "seconds" in TIMING_FIELDS
            row_keys |= set(row)
        questions_file = zh if out.name == "zh.jsonl" else None
        assert verification.verify(out, FIXTURE, questions_file=questions_file).verified, out
    assert row_keys == set(ROW_FIELDS)
    assert set(S.environment()) == set(S.ENVIRONMENT_FIELDS)
    assert set(S.package_versions()) == set(S.PACKAGES)
    assert {k for out in (resumed, merged) for e in json.loads(
        sidecar_path(out).read_text())["runs"] for k in e} <= set(S.RUN_ENTRY_FIELDS)


def test_the_window_verify_derives_is_the_one_the_pipeline_traces() -> None:
    from engram_eval.retrieval.pipeline import window_trace
    from engram_eval.retrieval.temporal import safe_time_window
    from engram_eval.runs import row_checks

    for text in ("What did I buy 3 weeks ago?", "Where was I last Saturday?", "Any plans?"):
        window, _ = safe_time_window(text, "2023/06/10 (Sat) 10:00")
        assert row_checks.window_trace(window) == window_trace(window)
    assert safe_time_window("What did I buy 3 weeks ago?", "2023/06/10 (Sat) 10:00")[0]
