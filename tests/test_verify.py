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

ROOT = Path(__file__).resolve().parents[1]
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
    assert names == ["sidecar schema", "fingerprint", ROWS, ROWS_HASH, "dataset sha256", GOLD,
                     METRICS, verification.SCORES, SUMMARY, SOURCES]
    assert "FAIL" not in rep.format() and "not checked" not in rep.format()
    assert rep.verdict() == "VERIFIED" and rep.exit_code == 0


def test_without_the_dataset_nothing_is_verified(result: Path) -> None:
    rep = verification.verify(result)
    assert rep.ok and not rep.verified  # nothing failed, but the gold was not re-derived
    assert set(not_checked(rep)) == {"dataset sha256", GOLD}
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
