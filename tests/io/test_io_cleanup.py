"""Every removal is contained and no output path is a link (issue 28).

:func:`engram_eval.io.remove_contained` removes only inside the output's own directory,
never through a symbolic link, and removes a link as a link; :func:`engram_eval.io.refuse_links`
refuses a link (dangling or not) where an output goes. Checked on real files: a directory
holding a sentinel file that a link points to must keep it, and a dangling link at a
result, sidecar, summary, plot or staging path is one clear error with nothing written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from engram_eval import io as eio
from engram_eval.cli import main as cli
from engram_eval.errors import ProvenanceError
from engram_eval.io import UnsafePathError, refuse_links, remove_contained
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import Staging, staging_dir
from engram_eval.runs.runner import run

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    """A directory outside the output directory holding files that must survive."""
    d = tmp_path / "precious"
    (d / "sub").mkdir(parents=True)
    (d / "sentinel.txt").write_text("keep")
    (d / "sub" / "deep.txt").write_text("keep")
    return d


def _intact(victim: Path) -> bool:
    return ((victim / "sentinel.txt").read_text() == "keep"
            and (victim / "sub" / "deep.txt").read_text() == "keep")


@pytest.fixture()
def outdir(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


def _cfg(**kw: Any) -> RunConfig:
    return RunConfig(retriever="dummy", progress=False, **kw)


# --------------------------------------------------------------------------- remove_contained
def test_a_link_to_a_directory_is_removed_as_a_link(outdir: Path, victim: Path) -> None:
    link = outdir / ".x.merging"
    link.symlink_to(victim, target_is_directory=True)
    assert remove_contained(link, outdir) is True
    assert not os.path.lexists(link) and _intact(victim)


def test_a_dangling_link_is_removed_as_a_link(outdir: Path) -> None:
    link = outdir / "stale.tmp"
    link.symlink_to(outdir / "nowhere")
    assert remove_contained(link, outdir, recursive=False) is True
    assert not os.path.lexists(link)


def test_a_tree_holding_links_keeps_what_they_point_to(outdir: Path, victim: Path) -> None:
    tree = outdir / ".spool-abc"
    (tree / "inner").mkdir(parents=True)
    (tree / "inner" / "file").write_text("x")
    (tree / "to-dir").symlink_to(victim, target_is_directory=True)
    (tree / "inner" / "to-file").symlink_to(victim / "sentinel.txt")
    assert remove_contained(tree, outdir) is True
    assert not tree.exists() and _intact(victim)


def test_a_path_through_a_link_is_refused(outdir: Path, victim: Path) -> None:
    (outdir / "stage").symlink_to(victim, target_is_directory=True)
    for p in (outdir / "stage" / "sentinel.txt", outdir / "stage" / "sub"):
        with pytest.raises(UnsafePathError) as e:
            remove_contained(p, outdir)
        assert str(outdir / "stage") in str(e.value) and "symbolic link" in str(e.value)
        assert "nothing was removed" in str(e.value)
    assert _intact(victim)


def test_a_path_through_a_link_inside_the_same_directory_is_refused(tmp_path: Path) -> None:
    """The link's target lies inside the root too: still never followed."""
    inner = tmp_path / "results"
    inner.mkdir()
    (inner / "keep.jsonl").write_text("keep")
    (tmp_path / ".m.merging").symlink_to(inner, target_is_directory=True)
    with pytest.raises(UnsafePathError):
        remove_contained(tmp_path / ".m.merging" / "keep.jsonl", tmp_path)
    assert (inner / "keep.jsonl").read_text() == "keep"


@pytest.mark.parametrize("where", ["outside", "root", "dotdot", "parent"])
def test_a_path_outside_the_root_is_refused(outdir: Path, victim: Path, where: str) -> None:
    p = {"outside": victim / "sentinel.txt", "root": outdir,
         "dotdot": outdir / ".." / "precious", "parent": outdir.parent}[where]
    with pytest.raises(UnsafePathError, match="refusing to remove"):
        remove_contained(p, outdir)
    assert _intact(victim) and outdir.is_dir()


def test_the_root_may_itself_be_reached_through_a_link(tmp_path: Path) -> None:
    """The caller's own output directory may be a link (the user's choice)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "tmp").write_text("x")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    assert remove_contained(tmp_path / "alias" / "tmp", tmp_path / "alias") is True
    assert not (real / "tmp").exists() and real.is_dir()


def test_missing_and_non_recursive(outdir: Path) -> None:
    assert remove_contained(outdir / "absent", outdir) is False
    full = outdir / "full"
    full.mkdir()
    (full / "f").write_text("x")
    with pytest.raises(OSError):
        remove_contained(full, outdir, recursive=False)  # only an empty directory
    assert (full / "f").exists()
    assert remove_contained(full, outdir, recursive=False, ignore_errors=True) is False
    (full / "f").unlink()
    assert remove_contained(full, outdir, recursive=False) is True


def test_a_refusal_is_not_a_storage_error(outdir: Path, victim: Path) -> None:
    """No "free space" hint is ever added to it by the layers above."""
    with pytest.raises(UnsafePathError) as e:
        remove_contained(victim, outdir)
    assert not eio.is_storage_error(e.value)
    assert isinstance(e.value, OSError)


# --------------------------------------------------------------------------- output paths
@pytest.mark.parametrize("dangling", [True, False])
def test_refuse_links_names_the_link(outdir: Path, victim: Path, dangling: bool) -> None:
    link = outdir / "r.jsonl.summary.json"
    link.symlink_to(outdir / "gone" if dangling else victim / "sentinel.txt")
    refuse_links(outdir / "plain-absent.json")  # absent: fine
    with pytest.raises(UnsafePathError) as e:
        refuse_links(outdir / "plain-absent.json", link)
    msg = str(e.value)
    assert msg.startswith(str(link)) and "is a symbolic link" in msg
    assert ("which does not exist" in msg) is dangling
    assert "remove the link" in msg and "\n" not in msg
    assert _intact(victim)


@pytest.mark.parametrize("writer", ["atomic", "exclusive", "streaming", "streaming-replace"])
def test_no_writer_goes_through_a_dangling_link(outdir: Path, tmp_path: Path,
                                                writer: str) -> None:
    target = tmp_path / "elsewhere" / "victim.json"
    target.parent.mkdir()
    link = outdir / "out.json"
    link.symlink_to(target)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        if writer == "atomic":
            eio.atomic_write(link, "{}")
        elif writer == "exclusive":
            eio.exclusive_write(link, "{}")
        else:
            with eio.streaming_write(link, exclusive=writer == "streaming") as f:
                f.write(b"{}")
    assert link.is_symlink() and not target.exists()
    assert sorted(p.name for p in outdir.iterdir()) == ["out.json"]  # no temporary left


# --------------------------------------------------------------------------- the run
@pytest.mark.parametrize("which", ["summary", "sidecar", "rows"])
def test_a_run_refuses_a_dangling_link_at_an_output_before_any_work(
        outdir: Path, tmp_path: Path, which: str) -> None:
    out = outdir / "r.jsonl"
    at = {"summary": summary_path(out), "sidecar": sidecar_path(out), "rows": out}[which]
    target = tmp_path / "elsewhere.json"
    at.symlink_to(target)
    with pytest.raises(UnsafePathError) as e:
        run(_cfg(), TINY, out, echo=lambda m: None)
    assert str(at) in str(e.value) and "which does not exist" in str(e.value)
    assert [p.name for p in outdir.iterdir()] == [at.name] and not target.exists()


def test_a_resume_refuses_a_link_at_the_summary(outdir: Path, tmp_path: Path) -> None:
    out = outdir / "r.jsonl"
    run(_cfg(), TINY, out, echo=lambda m: None)
    keep = tmp_path / "keep.json"
    keep.write_text("keep")
    summary_path(out).unlink()
    summary_path(out).symlink_to(keep)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        run(_cfg(), TINY, out, resume=True, echo=lambda m: None)
    assert keep.read_text() == "keep"


def test_the_cli_says_it_in_one_line(outdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = outdir / "r.jsonl"
    summary_path(out).symlink_to(outdir / "nowhere")
    rc = cli.main(["run", str(TINY), "--retriever", "dummy", "--no-progress",
                   "--output", str(out)])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1, err
    assert str(summary_path(out)) in err[0] and "symbolic link" in err[0]
    assert not out.exists()


# --------------------------------------------------------------------------- merge
@pytest.fixture()
def shards(tmp_path: Path) -> list[Path]:
    d = tmp_path / "shards"
    d.mkdir()
    outs = []
    for i in range(2):
        o = d / f"s{i}.jsonl"
        run(_cfg(shard=f"{i}/2"), TINY, o, echo=lambda m: None)
        outs.append(o)
    return outs


def _merge(shards: list[Path], out: Path) -> Any:
    from engram_eval.runs.merge import merge

    return merge(shards, out, dataset=TINY, echo=lambda m: None)


@pytest.mark.parametrize("which", ["summary", "sidecar", "rows", "staging"])
def test_a_merge_refuses_a_dangling_link_at_an_output(shards: list[Path], outdir: Path,
                                                      tmp_path: Path, which: str) -> None:
    out = outdir / "m.jsonl"
    at = {"summary": summary_path(out), "sidecar": sidecar_path(out), "rows": out,
          "staging": staging_dir(out)}[which]
    target = tmp_path / "elsewhere"
    at.symlink_to(target)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        _merge(shards, out)
    assert [p.name for p in outdir.iterdir()] == [at.name] and not target.exists()


def test_a_stale_merge_directory_holding_links_is_cleaned_without_following_them(
        shards: list[Path], outdir: Path, victim: Path) -> None:
    out = outdir / "m.jsonl"
    stage = staging_dir(out)
    stage.mkdir()
    (stage / "owner").write_text("pid 4206649 on somehost\n")
    (stage / "rows").symlink_to(victim / "sentinel.txt")
    (stage / "to-dir").symlink_to(victim, target_is_directory=True)
    (stage / "partial").mkdir()
    (stage / "partial" / "in").symlink_to(victim, target_is_directory=True)
    summary = _merge(shards, out)
    assert summary["fingerprint"]
    assert not stage.exists() and _intact(victim)
    assert sorted(p.name for p in outdir.iterdir()) == sorted(
        [out.name, sidecar_path(out).name, summary_path(out).name])


def test_staging_acquire_refuses_a_dangling_link(outdir: Path, tmp_path: Path) -> None:
    out = outdir / "m.jsonl"
    staging_dir(out).symlink_to(tmp_path / "nowhere")
    with pytest.raises(ProvenanceError, match="symbolic link"):
        Staging(out, echo=lambda m: None).acquire()
    assert not (tmp_path / "nowhere").exists()


# --------------------------------------------------------------------------- other outputs
def test_compress_refuses_a_dangling_link_and_keeps_the_original(outdir: Path,
                                                                  tmp_path: Path) -> None:
    from engram_eval.runs.export import compress_result

    out = outdir / "r.jsonl"
    run(_cfg(), TINY, out, echo=lambda m: None)
    before = sorted(p.name for p in outdir.iterdir())
    link = summary_path(Path(str(out) + ".gz"))
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        compress_result(out)
    assert sorted(p.name for p in outdir.iterdir()) == sorted([*before, link.name])
    assert not (tmp_path / "nowhere").exists()


def test_compress_removes_a_linked_original_as_a_link(outdir: Path, tmp_path: Path) -> None:
    from engram_eval.runs.export import compress_result

    real = tmp_path / "real"
    real.mkdir()
    out = real / "r.jsonl"
    run(_cfg(), TINY, out, echo=lambda m: None)
    # the result reached through a link in the output directory: the link goes, never
    # the file it points to
    link = outdir / "r.jsonl"
    link.symlink_to(out)
    for p in (sidecar_path(out), summary_path(out)):
        os.link(p, outdir / p.name)
    dst = compress_result(link)
    assert dst.is_file() and not os.path.lexists(link)
    assert out.is_file()


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_plot_is_never_written_through_a_link(outdir: Path, tmp_path: Path,
                                                overwrite: bool) -> None:
    from engram_eval.analysis.plots import _save

    class Fig:
        def savefig(self, buf: Any, **kw: Any) -> None:  # never reached
            raise AssertionError("rendered")

    link = outdir / "plot.png"
    link.symlink_to(tmp_path / "nowhere.png")
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        _save(Fig(), link, overwrite)
    assert not (tmp_path / "nowhere.png").exists()


def test_split_refuses_a_dangling_link(tmp_path: Path) -> None:
    from engram_eval.data.split import MANIFEST_NAME, split_dataset

    out = tmp_path / "parts"
    out.mkdir()
    (out / MANIFEST_NAME).symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError, match=MANIFEST_NAME):
        split_dataset(TINY, holdout=0.5, salt="s", output_dir=out)
    assert not (tmp_path / "nowhere").exists()


def test_production_outputs_refuse_a_dangling_link(tmp_path: Path) -> None:
    from engram_eval.production_eval.runner import run_fixture

    fx = tmp_path / "fx.json"
    fx.write_text(json.dumps({
        "name": "tiny", "version": 1, "heldout": False,
        "cases": [{"case_id": "c1",
                   "memories": [{"id": "a", "text": "a puppy", "date": "2024-03-02"}],
                   "questions": [{"question_id": "q", "query": "puppy?", "now": "2024-05-01",
                                  "gold": ["a"]}]}]}))
    out = tmp_path / "o" / "out.json"
    out.parent.mkdir()
    summ = Path(str(out) + ".summary.json")
    summ.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        run_fixture(fx, out, tmp_path / "work", None, REPO)  # type: ignore[arg-type]
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "work").exists()
