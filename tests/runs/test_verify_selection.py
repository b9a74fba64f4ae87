"""``verify`` states and checks that a run's rows are exactly the questions its recorded
selection (``--question-id``, ``--limit``, ``--shard``, none = all) takes from ``--dataset``,
in the order ``run`` writes them (issue 43, "the package's own promise").

Every forgery here is sealed with the package's own functions (:func:`run_files.reseal`:
rows serialised as the runner does, rows hash, summary and fingerprint recomputed), so what
fails is the content, never a stale hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_files import copy_run, reseal

from engram_eval.cli import main as cli
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.runs import runner
from engram_eval.runs import verify as verification
from engram_eval.runs.config import RunConfig
from engram_eval.runs.rows import scan_rows

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
ALL_IDS = [f"lme_t{i:02d}" for i in range(1, 10)] + ["lme_t10_abs", "lme_t11_abs", "lme_t12"]
SELECTION = verification.SELECTION


def failed(rep: verification.VerifyReport) -> dict[str, str]:
    return {name: detail for name, status, detail in rep.checks if status == "FAIL"}


def status(rep: verification.VerifyReport, name: str) -> tuple[str, str]:
    return next((s, d) for n, s, d in rep.checks if n == name)


def run(tmp: Path, name: str, **kw: object) -> Path:
    out = tmp / f"{name}.jsonl"
    runner.run(RunConfig(retriever="dummy", progress=False, **kw),  # type: ignore[arg-type]
               FIXTURE, out, echo=lambda m: None)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Good runs of every selection rule (never modified: tests forge copies)."""
    tmp = tmp_path_factory.mktemp("selection")
    return {"all": run(tmp, "all"), "limit": run(tmp, "limit", limit=5),
            "ids": run(tmp, "ids", question_ids=["lme_t09", "lme_t02", "lme_t05"]),
            "shard": run(tmp, "shard", shard="1/3")}


@pytest.fixture
def copy(runs: dict[str, Path], tmp_path: Path):
    return lambda name: copy_run(runs[name], tmp_path / f"{name}.jsonl")


def rows_of(path: Path) -> list[dict]:
    return scan_rows(path).rows


def drop(ids: list[str]):
    """Remove ``ids`` from ``selection.ids`` (and ``n``), as a forger hiding them would."""
    def edit(meta: dict) -> None:
        sel = meta["selection"]
        sel["ids"] = [i for i in sel["ids"] if i not in ids]
        sel["n"] = len(sel["ids"])
    return edit


@pytest.mark.parametrize("name", ["all", "limit", "ids", "shard"])
def test_each_selection_rule_verifies_and_is_stated(runs: dict[str, Path], name: str) -> None:
    rep = verification.verify(runs[name], FIXTURE)
    assert rep.verified, rep.format()
    state, detail = status(rep, SELECTION)
    assert state == "ok"
    n = len(rows_of(runs[name]))
    assert detail.startswith(f"{n} of the dataset's 12 questions, selected by ")
    assert {"all": "every question", "limit": "--limit 5", "ids": "--question-id x3",
            "shard": "--shard 1/3"}[name] in detail


def test_the_worst_questions_removed_and_resealed_fail_verify_also_with_rerun(copy) -> None:
    """The issue's forgery: the run's worst questions removed from the rows, from
    ``selection.ids`` and ``n``; summary, rows hash and fingerprint recomputed."""
    forged = copy("all")
    rows = rows_of(forged)
    worst = sorted((r for r in rows if r["metrics"]["all"] is not None),
                   key=lambda r: r["metrics"]["all"]["mrr"])[:3]
    gone = [r["question_id"] for r in worst]
    kept = [r for r in rows if r["question_id"] not in gone]
    reseal(forged, kept, drop(gone))
    # every hash and count agrees: only the selection check can tell
    rep = verification.verify(forged, FIXTURE, rerun=12, rerun_seed=0)
    bad = failed(rep)
    assert list(bad) == [SELECTION], rep.format()
    assert "the run (every question (no --question-id, --limit or --shard)) lacks 3 " \
           "question(s) the selection takes: " + "; ".join(i for i in ALL_IDS if i in gone) \
           == bad[SELECTION]
    assert rep.exit_code == 1 and rep.verdict() == "NOT VERIFIED (a check failed)"
    # the re-ranked sample (the rows it holds) agreed: the rerun does not see deletions
    assert any(n.startswith("rerun K=9") and s == "ok" for n, s, _ in rep.checks)


def test_the_forgery_without_the_dataset_is_not_verified_and_says_why(copy) -> None:
    forged = copy("all")
    reseal(forged, rows_of(forged)[1:], drop(["lme_t01"]))
    rep = verification.verify(forged)
    state, detail = status(rep, SELECTION)
    assert state == "not checked" and "needs the dataset the run used (--dataset)" in detail
    assert rep.exit_code == 3


def test_cli_names_the_missing_questions(copy, capsys: pytest.CaptureFixture[str]) -> None:
    forged = copy("limit")
    reseal(forged, [r for r in rows_of(forged) if r["question_id"] != "lme_t03"],
           drop(["lme_t03"]))
    assert cli.main(["verify", str(forged), "--dataset", str(FIXTURE)]) == 1
    out = capsys.readouterr().out
    assert f"[FAIL] {SELECTION}: the run (--limit 5) lacks 1 question(s) the selection " \
           "takes: lme_t03" in out
    assert out.rstrip().endswith("NOT VERIFIED (a check failed)")


def test_a_question_outside_the_recorded_ids_is_named(copy) -> None:
    """A row and selection id added for a question the recorded ``--question-id``s do not
    name (taken from another run of the same dataset)."""
    forged = copy("ids")
    extra = next(r for r in rows_of(copy("all")) if r["question_id"] == "lme_t12")
    rows = rows_of(forged) + [extra]

    def add(meta: dict) -> None:
        meta["selection"]["ids"].append("lme_t12")
        meta["selection"]["n"] += 1

    reseal(forged, rows, add)
    bad = failed(verification.verify(forged, FIXTURE))
    assert list(bad) == [SELECTION]
    assert bad[SELECTION] == ("the run (--question-id x3) holds 1 question(s) the selection "
                              "does not take: lme_t12")


def test_selection_ids_in_another_order_than_the_rule_gives(copy) -> None:
    forged = copy("ids")
    rows = rows_of(forged)[::-1]

    def reverse(meta: dict) -> None:
        meta["selection"]["ids"].reverse()

    reseal(forged, rows, reverse)
    bad = failed(verification.verify(forged, FIXTURE))
    assert list(bad) == [SELECTION]
    assert bad[SELECTION] == ("the run (--question-id x3) is in another order: position 1 "
                              "holds 'lme_t09', the selection takes 'lme_t02' there")


def test_rows_in_another_order_than_the_selection(copy) -> None:
    forged = copy("all")
    rows = rows_of(forged)
    rows[0], rows[1] = rows[1], rows[0]
    reseal(forged, rows)
    for rep in (verification.verify(forged, FIXTURE), verification.verify(forged)):
        bad = failed(rep)
        assert list(bad) == [SELECTION], rep.format()
        assert bad[SELECTION] == ("the rows file is in another order: position 1 holds "
                                  "'lme_t02', the selection takes 'lme_t01' there")


@pytest.mark.parametrize(("edit", "named"), [
    (lambda m: m["config"].__setitem__("limit", 4),
     "config.limit is 4, but selection.limit is 5"),
    (lambda m: m["selection"].__setitem__("limit", 4),
     "config.limit is 5, but selection.limit is 4"),
    (lambda m: (m["selection"].__setitem__("limit", 4), m["config"].__setitem__("limit", 4)),
     "the run (--limit 4) holds 1 question(s) the selection does not take: lme_t05"),
    (lambda m: m["selection"].__setitem__("n", 4),
     "selection.n is 4, but selection.ids holds 5"),
    (lambda m: m["config_recorded"].__setitem__("shard", "0/2"),
     "config_recorded.shard is '0/2', but the selection records no shard"),
])
def test_a_recorded_rule_that_contradicts_itself_or_the_ids(copy, edit, named: str) -> None:
    forged = reseal(copy("limit"), edit_meta=edit)
    rep = verification.verify(forged, FIXTURE)
    bad = failed(rep)
    assert list(bad) == [SELECTION] and named in bad[SELECTION], rep.format()


def test_a_shard_with_a_question_removed(copy) -> None:
    forged = copy("shard")
    rows = rows_of(forged)
    gone = rows[0]["question_id"]
    reseal(forged, rows[1:], drop([gone]))
    bad = failed(verification.verify(forged, FIXTURE))
    assert list(bad) == [SELECTION]
    assert bad[SELECTION] == (f"the run (--shard 1/3) lacks 1 question(s) the selection "
                              f"takes: {gone}")


def test_a_shard_whose_whole_selection_was_edited_too(copy) -> None:
    """Removed from the shard's rows and ids and from ``all_ids`` (so that a merge would not
    miss it either): the dataset still gives it."""
    forged = copy("shard")
    rows = rows_of(forged)
    gone = rows[0]["question_id"]

    def edit(meta: dict) -> None:
        drop([gone])(meta)
        meta["selection"]["shard"]["all_ids"].remove(gone)

    reseal(forged, rows[1:], edit)
    bad = failed(verification.verify(forged, FIXTURE))
    assert list(bad) == [SELECTION]
    assert bad[SELECTION].startswith("selection.shard.all_ids lacks 1 question(s) the "
                                     f"selection takes: {gone}")


@pytest.mark.parametrize(("edit", "named"), [
    (lambda sh: sh.__setitem__("rule", "sha1"), "selection.shard is not a shard this package"),
    (lambda sh: sh.__setitem__("index", 7), "selection.shard is not a shard this package"),
    (lambda sh: sh.__setitem__("index", 0), "selection.shard is 0/3, but config_recorded"),
])
def test_a_malformed_or_contradicting_shard_record(copy, edit, named: str) -> None:
    forged = reseal(copy("shard"), edit_meta=lambda m: edit(m["selection"]["shard"]))
    bad = failed(verification.verify(forged, FIXTURE))
    assert SELECTION in bad and named in bad[SELECTION], bad


def test_unknown_recorded_question_ids(copy) -> None:
    def edit(meta: dict) -> None:
        for part in ("config", "selection"):
            meta[part]["question_ids"] = ["lme_t02", "nope"]

    forged = reseal(copy("ids"), edit_meta=edit)
    bad = failed(verification.verify(forged, FIXTURE))
    assert list(bad) == [SELECTION]
    assert bad[SELECTION] == f"--question-id: nope not found in {FIXTURE}"


def test_nothing_is_written_by_verify(copy) -> None:
    forged = copy("all")
    reseal(forged, rows_of(forged)[2:], drop(["lme_t01", "lme_t02"]))
    before = {p: p.read_bytes() for p in forged.parent.iterdir()}
    verification.verify(forged, FIXTURE)
    assert {p: p.read_bytes() for p in forged.parent.iterdir()} == before
    assert json.loads(sidecar_path(forged).read_text())["selection"]["n"] == 10
