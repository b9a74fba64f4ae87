"""make-stress: padded haystacks from other questions' non-evidence sessions."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.data.longmemeval import load_longmemeval
from engram_eval.data.stress import make_stress, meta_path, parse_date
from engram_eval.errors import DataError, ProvenanceError
from engram_eval.io import sha256_file

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_tiny.json"
TARGET = 20


def _evidence(records: list[dict]) -> set[str]:  # type: ignore[type-arg]
    out: set[str] = set()
    for r in records:
        out |= set(r["answer_session_ids"])
        for sid, turns in zip(r["haystack_session_ids"], r["haystack_sessions"], strict=True):
            if any(t.get("has_answer") is True for t in turns):
                out.add(sid)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("stress") / "stress.json"
    meta = make_stress(FIXTURE, out, sessions=TARGET, seed=7)
    return out, meta


def test_padding_rules(built) -> None:  # type: ignore[no-untyped-def]
    out, meta = built
    src = json.loads(FIXTURE.read_text())
    new = json.loads(out.read_text())
    evidence = _evidence(src)
    content = {sid: turns for r in src
               for sid, turns in zip(r["haystack_session_ids"], r["haystack_sessions"],
                                     strict=True)}
    assert [r["question_id"] for r in new] == [r["question_id"] for r in src]
    for old, rec in zip(src, new, strict=True):
        # every field but the haystack is unchanged
        for k in old:
            if not k.startswith("haystack_"):
                assert rec[k] == old[k], k
        triples = list(zip(rec["haystack_session_ids"], rec["haystack_dates"],
                           rec["haystack_sessions"], strict=True))
        orig = list(zip(old["haystack_session_ids"], old["haystack_dates"],
                        old["haystack_sessions"], strict=True))
        own = set(old["haystack_session_ids"])
        # originals kept, in order, with their dates, turns and has_answer flags
        assert [t for t in triples if t[0] in own] == orig
        fillers = [t for t in triples if t[0] not in own]
        assert len(set(rec["haystack_session_ids"])) == max(TARGET, len(own))
        assert len(fillers) == len({f[0] for f in fillers})
        dates = [d for d in (parse_date(x) for x in old["haystack_dates"]) if d]
        for sid, date, turns in fillers:
            assert sid not in evidence
            assert turns == content[sid]  # copied whole from another question's haystack
            assert min(dates) <= parse_date(date) <= max(dates)
    assert meta["synthetic"] is True and meta["seed"] == 7 and meta["sessions"] == TARGET
    assert meta["source"]["sha256"] == sha256_file(FIXTURE)
    assert meta["output"]["sha256"] == sha256_file(out)
    assert json.loads(meta_path(out).read_text()) == meta
    # the official loader accepts it
    assert len(load_longmemeval(out).questions) == len(src)


def test_deterministic_given_seed_and_gzip(built, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, _ = built
    again = tmp_path / "again.json"
    make_stress(FIXTURE, again, sessions=TARGET, seed=7)
    assert again.read_bytes() == out.read_bytes()
    other = tmp_path / "other.json"
    make_stress(FIXTURE, other, sessions=TARGET, seed=8)
    assert other.read_bytes() != out.read_bytes()
    gz = tmp_path / "again.json.gz"
    make_stress(FIXTURE, gz, sessions=TARGET, seed=7)
    assert gzip.decompress(gz.read_bytes()) == out.read_bytes()


def test_refuses_existing_output_and_bad_source(built, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, _ = built
    with pytest.raises(ProvenanceError, match="already exists"):
        make_stress(FIXTURE, out, sessions=TARGET, seed=7)
    src = json.loads(FIXTURE.read_text())
    del src[5]["question_date"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(src))
    target = tmp_path / "x" / "never.json"
    with pytest.raises(DataError, match="question_date"):
        make_stress(bad, target, sessions=TARGET, seed=1)
    assert not target.exists() and not meta_path(target).exists()
    assert [p.name for p in target.parent.iterdir()] == []


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(k, "1" if k != "TOKENIZERS_PARALLELISM" else "false")
    out = tmp_path / "s.json"
    rc = cli.main(["make-stress", str(FIXTURE), "--sessions", "15", "--seed", "3",
                   "--output", str(out)])
    assert rc == 0 and out.is_file() and meta_path(out).is_file()
    assert "synthetic" in capsys.readouterr().out


def test_limit_writes_the_first_questions(tmp_path: Path) -> None:
    out = tmp_path / "lim.json"
    meta = make_stress(FIXTURE, out, sessions=TARGET, seed=7, limit=3)
    src = json.loads(FIXTURE.read_text())
    new = json.loads(out.read_text())
    assert [r["question_id"] for r in new] == [r["question_id"] for r in src[:3]]
    assert meta["n_questions"] == 3 and meta["source_questions"] == len(src)
    assert meta["limit"] == 3
