"""The other side of the held-out guard (issue 43): a person can see and forget what
``engram-eval split`` registered, and the README main job keeps working on a fixture they
once split.

* ``engram-eval heldout list``: every registered part (file, hashes, split manifest, when);
* ``engram-eval heldout forget PART --reason TEXT``: on the record (the registry's
  ``forgotten`` list: time, reason, the entry), a reason required, no file deleted;
* a plain ``run`` of a split's *source* runs, labelled "contains held-out questions: not a
  measurement" in its sidecar and summary, and every command that chooses settings refuses
  the labelled run; after ``forget`` the same run is not labelled; the held-out part itself
  is still refused by the choosing commands (its split marker stays).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from frozen_runs import run_dummy

from engram_eval.cli import main as cli
from engram_eval.io import sha256_file
from engram_eval.provenance import guard as G
from engram_eval.provenance import registry as R

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "longmemeval_tiny.json"
GRID = REPO / "benchmarks" / "longmemeval" / "tune_grid.yaml"


@pytest.fixture()
def split(tmp_path, monkeypatch, capsys):
    """The README user's split: `engram-eval split fixtures/longmemeval_tiny.json --holdout
    0.5 ...` into tmp/D (under no search root). Yields (tmp, manifest, held-out part)."""
    monkeypatch.setenv("ENGRAM_EVAL_LEDGER", str(tmp_path / "ledger.json"))
    monkeypatch.delenv("ENGRAM_EVAL_HELDOUT_ROOTS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["split", str(TINY), "--holdout", "0.5", "--salt", "readme",
                     "--output-dir", "D"]) == 0
    out = capsys.readouterr().out
    assert "`engram-eval heldout list` shows it" in out
    manifest = json.loads((tmp_path / "D" / "split_manifest.json").read_text())
    yield tmp_path, manifest, tmp_path / "D" / manifest["parts"]["heldout"]["file"]


def _files(d: Path) -> dict[str, str]:
    return {str(p): sha256_file(p) for p in sorted(d.rglob("*")) if p.is_file()}


def _readme_job(out: Path) -> tuple[dict, dict]:
    """The README main job (`engram-eval run fixtures/longmemeval_tiny.json --output X`,
    the dummy retriever): its sidecar and summary."""
    assert run_dummy(str(TINY), "--output", str(out)) == 0
    return (json.loads(Path(f"{out}.metadata.json").read_text()),
            json.loads(Path(f"{out}.summary.json").read_text()))


# --------------------------------------------------------------------------- list


def test_list_shows_every_registered_part(split, capsys):
    tmp, manifest, held = split
    assert cli.main(["split", str(REPO / "fixtures" / "locomo_tiny.json"), "--holdout", "0.5",
                     "--salt", "b", "--output-dir", "L"]) == 0
    capsys.readouterr()
    assert cli.main(["heldout", "list"]) == 0
    out = capsys.readouterr().out
    reg = json.loads(R.registry_path().read_text())
    assert f"held-out registry {R.registry_path()}: 2 registered part(s)" in out
    h = manifest["parts"]["heldout"]
    entry = reg["parts"][h["sha256"]]
    for text in (f"{h['sha256']}  {h['file']}", f"content sha256 {h['content_sha256']}",
                 f"source sha256 {manifest['source']['sha256']} (salt 'readme', holdout 0.5)",
                 f"split manifest {tmp / 'D' / 'split_manifest.json'}",
                 f"registered {entry['registered_at']}", f"{h['n_questions']} question(s)"):
        assert text in out
    assert "locomo_tiny.heldout.json" in out
    # the records under the repository's results/ are listed apart: forget does not apply
    assert "`heldout forget` does not apply" in out


# --------------------------------------------------------------------------- forget


def test_forget_needs_a_reason_and_changes_nothing_without_one(split, capsys):
    tmp, manifest, held = split
    before = R.registry_path().read_bytes()
    with pytest.raises(SystemExit):  # argparse: --reason is required
        cli.main(["heldout", "forget", str(held)])
    assert "--reason" in capsys.readouterr().err
    for blank in ("", "   \t"):
        assert cli.main(["heldout", "forget", str(held), "--reason", blank]) == 2
        err = capsys.readouterr().err
        assert "--reason TEXT is required" in err and len(err.strip().splitlines()) == 1
    assert R.registry_path().read_bytes() == before


@pytest.mark.parametrize("given", ["unknown_file", "short_key", "source", "nothing"])
def test_forget_refuses_what_names_no_registered_part(split, capsys, given):
    tmp, manifest, held = split
    before = R.registry_path().read_bytes()
    other = tmp / "other.json"
    other.write_text((REPO / "fixtures" / "locomo_tiny.json").read_text())
    arg = {"unknown_file": str(other), "short_key": manifest["parts"]["heldout"]["sha256"][:6],
           "source": str(TINY), "nothing": "no-such-file.json"}[given]
    assert cli.main(["heldout", "forget", arg, "--reason", "x"]) == 2
    err = capsys.readouterr().err
    assert arg in err and "`engram-eval heldout list`" in err
    if given == "source":
        assert "split from, not a held-out part" in err
    assert R.registry_path().read_bytes() == before


@pytest.mark.parametrize("how", ["key_prefix", "full_key", "part_file", "gzip_copy"])
def test_forget_is_recorded_and_deletes_nothing(split, capsys, how):
    tmp, manifest, held = split
    key = manifest["parts"]["heldout"]["sha256"]
    gz = tmp / "copy.json.gz"
    gz.write_bytes(gzip.compress(held.read_bytes(), mtime=5))
    files = _files(tmp / "D")
    entry = json.loads(R.registry_path().read_text())["parts"][key]
    arg = {"key_prefix": key[:12], "full_key": key, "part_file": str(held),
           "gzip_copy": str(gz)}[how]
    capsys.readouterr()
    assert cli.main(["heldout", "forget", arg, "--reason", "  split by mistake \n"]) == 0
    out = capsys.readouterr().out
    assert f"forgot held-out part {held.name} (sha256 {key})" in out
    assert "no file was deleted" in out
    assert f"the split marker {held}.split.json still marks" in out
    reg = json.loads(R.registry_path().read_text())
    assert key not in reg["parts"]
    [gone] = reg["forgotten"]
    assert gone["key"] == key and gone["reason"] == "split by mistake"
    assert gone["entry"] == entry and gone["given"] == arg and gone["forgotten_at"]
    assert _files(tmp / "D") == files and gz.exists()  # nothing deleted or changed
    assert G.inspect_dataset(gz) is None  # the copy is no longer held out
    # the ledger of forgotten parts is listed
    assert cli.main(["heldout", "list"]) == 0
    out = capsys.readouterr().out
    assert "0 registered part(s)" in out and "forgotten: 1 part(s)" in out
    assert "split by mistake" in out
    # forgetting again: nothing registered under that name any more
    assert cli.main(["heldout", "forget", key, "--reason", "again"]) == 2
    assert len(json.loads(R.registry_path().read_text())["forgotten"]) == 1


# --------------------------------------------------------------------------- the README main job


def test_the_readme_main_job_runs_labelled_then_unlabelled_after_forget(split, capsys):
    tmp, manifest, held = split
    key = manifest["parts"]["heldout"]["sha256"]
    n_held = manifest["parts"]["heldout"]["n_questions"]
    capsys.readouterr()
    # before forgetting: it runs, labelled, in the sidecar and the summary
    side, summ = _readme_job(tmp / "X.jsonl")
    out = capsys.readouterr()
    label = side[G.LABEL_FIELD]
    assert summ[G.LABEL_FIELD] == label
    assert label["label"] == G.CONTAINS_HELDOUT == "contains held-out questions: not a measurement"
    assert label["n_heldout_questions"] == n_held and label["n_questions"] == 12
    assert label["registered"] == key and held.name in label["heldout_part"]
    assert f"labelled: {G.CONTAINS_HELDOUT}" in out.out and G.CONTAINS_HELDOUT in out.err
    assert "frozen_source" not in side and not (tmp / "ledger.json").exists()
    assert cli.main(["verify", str(tmp / "X.jsonl"), "--dataset", str(TINY)]) == 0
    capsys.readouterr()
    # every choosing command refuses the labelled run, naming the part and the commands
    cmds = {"tune": ["tune", str(tmp / "X.jsonl"), "--grid", str(GRID), "--output",
                     str(tmp / "t.yaml")],
            "confidence-study": ["confidence-study", str(tmp / "X.jsonl"), "--dataset",
                                 str(tmp / "D" / manifest["parts"]["tune"]["file"]),
                                 "--output", str(tmp / "cs.json")]}
    for name, argv in cmds.items():
        assert cli.main(argv) == 2, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert G.CONTAINS_HELDOUT in err and held.name in err
        assert "`engram-eval heldout list`" in err
        assert f"`engram-eval heldout forget {key[:16]} --reason TEXT`" in err
    assert not (tmp / "t.yaml").exists() and not (tmp / "cs.json").exists()
    # the label edited away: the run's dataset is still the split's source
    side.pop(G.LABEL_FIELD)
    with pytest.raises(Exception) as e:
        G.refuse_heldout_run(side, tmp / "X.jsonl", "tuning")
    assert "was split from" in str(e.value) and held.name in str(e.value)
    # forget the part: the README main job runs, not labelled
    assert cli.main(["heldout", "forget", str(held), "--reason", "README demo"]) == 0
    side, summ = _readme_job(tmp / "Y.jsonl")
    assert G.LABEL_FIELD not in side and G.LABEL_FIELD not in summ
    assert "labelled" not in capsys.readouterr().out
    G.refuse_heldout_run(side, tmp / "Y.jsonl", "tuning")  # no longer refused


def test_a_choosing_command_refuses_the_heldout_part_itself(split, capsys):
    """After a plain split, and after forget too (the split marker beside the part stays)."""
    tmp, manifest, held = split
    run = tmp / "X.jsonl"
    _readme_job(run)
    for step in ("split", "forgotten"):
        if step == "forgotten":
            assert cli.main(["heldout", "forget", str(held), "--reason", "x"]) == 0
        capsys.readouterr()
        out = tmp / f"cs_{step}.json"
        assert cli.main(["confidence-study", str(run), "--dataset", str(held),
                         "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert str(held) in err and "held-out" in err and "confidence study" in err
        assert not out.exists()
        assert run_dummy(str(held), "--output", str(tmp / f"h_{step}.jsonl")) == 2
        assert "frozen manifest" in capsys.readouterr().err


def test_a_subset_of_the_source_is_still_refused_and_resume_sees_a_change(split, capsys):
    """Only the recorded source runs labelled: any other file holding held-out questions
    is refused as before. A labelled run whose registry entry is forgotten does not resume
    (its label would no longer hold)."""
    tmp, manifest, held = split
    records = json.loads(TINY.read_text())
    sub = tmp / "sub.json"
    sub.write_text(json.dumps(records[:-1]))
    assert run_dummy("sub.json", "--output", str(tmp / "s.jsonl")) == 2
    err = capsys.readouterr().err
    assert "only the held-out part itself runs" in err and not (tmp / "s.jsonl").exists()
    assert "sub.json: holds" in err and "(a link to" not in err  # a plain file is no link
    assert "`engram-eval heldout forget" in err
    _readme_job(tmp / "X.jsonl")
    assert cli.main(["heldout", "forget", str(held), "--reason", "x"]) == 0
    rows = (tmp / "X.jsonl").read_bytes()
    assert run_dummy(str(TINY), "--output", str(tmp / "X.jsonl"), "--resume") == 2
    err = capsys.readouterr().err
    assert "changed since this run started" in err and "start a new run" in err
    assert (tmp / "X.jsonl").read_bytes() == rows


def test_a_link_is_named_a_link_and_a_plain_relative_path_is_not(split, capsys):
    tmp, manifest, held = split
    records = json.loads(held.read_text())
    (tmp / "mix.json").write_text(json.dumps(records[:2]))
    os.symlink("mix.json", tmp / "mix_link.json")
    assert run_dummy("mix.json", "--output", "a.jsonl") == 2
    err = capsys.readouterr().err
    assert err.startswith("engram-eval run: error: mix.json: holds 2") and "link" not in \
        err.split("holds")[0]
    assert run_dummy("mix_link.json", "--output", "b.jsonl") == 2
    err = capsys.readouterr().err
    assert f"mix_link.json (a link to {tmp.resolve() / 'mix.json'})" in err


def test_the_label_survives_a_merge_and_verify_checks_it(split, capsys):
    """Shards of the source are labelled; their merge carries the label into its summary
    (verify passes); a summary whose label was removed fails verify."""
    tmp, manifest, held = split
    for i in range(2):
        assert run_dummy(str(TINY), "--shard", f"{i}/2", "--output", f"s{i}.jsonl") == 0
    assert cli.main(["merge", "s0.jsonl", "s1.jsonl", "--dataset", str(TINY),
                     "--output", "m.jsonl"]) == 0
    side = json.loads((tmp / "m.jsonl.metadata.json").read_text())
    summ = json.loads((tmp / "m.jsonl.summary.json").read_text())
    assert summ[G.LABEL_FIELD] == side[G.LABEL_FIELD]
    assert side[G.LABEL_FIELD]["label"] == G.CONTAINS_HELDOUT
    assert cli.main(["verify", "m.jsonl", "--dataset", str(TINY)]) == 0
    summ.pop(G.LABEL_FIELD)
    (tmp / "m.jsonl.summary.json").write_text(json.dumps(summ))
    capsys.readouterr()
    assert cli.main(["verify", "m.jsonl", "--dataset", str(TINY)]) != 0
    assert "summary heldout_questions None differs from the sidecar's" in capsys.readouterr().out
