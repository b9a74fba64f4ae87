"""Commands that check or hand out results: ``verify`` (re-check a published run), ``score``
(score any system's rankings on identical definitions), ``export`` (rankings without
conversation text), ``trec`` (TREC run file and qrels), ``catalog`` (the catalogue of published
results: write or check) and ``reproduce`` (re-execute a catalogued result)."""

from __future__ import annotations

import argparse
from typing import Any

from engram_eval.cli._common import (
    add_overlay_arg,
    add_sidecar_arg,
    check_free,
    output_file,
    seed_int,
)
from engram_eval.errors import EngramEvalError
from engram_eval.provenance.sources import derived_sources


def add_verify(sub: Any) -> None:
    v = sub.add_parser("verify", help="recompute and re-check a published result")
    v.add_argument("result")
    v.add_argument("--dataset", help="dataset file to re-hash and re-derive gold from "
                   "(without it nothing is VERIFIED and the exit status is 3)")
    v.add_argument("--sources-at", metavar="COMMIT",
                   help="compare the recorded source hashes with the files committed at this "
                   "git revision (the commit that published the run) instead of the installed "
                   "package, so a run published before later code changes stays checkable")
    v.add_argument("--rerun", metavar="K", type=int, default=0,
                   help="also re-rank K questions sampled from the run's selection (with "
                   "random.Random(SEED)) with the recorded settings and models, the cache off, "
                   "and require the recorded rankings exactly and the scores within 1e-4 x "
                   "max(1, |recorded|): CPU inference is deterministic for one batch on one "
                   "machine, but a text encoded in another batch, machine or thread count "
                   "sums in another order and moves a float32 score by ~1e-6 (metrics depend "
                   "on the ranking alone). Refused when the model files that resolve now "
                   "differ from the recorded sha256. Needs --dataset")
    v.add_argument("--questions", metavar="FILE",
                   help="for a run made with `run --questions FILE`: the same file (checked "
                   "by sha256), whose texts re-derive the time windows the traces record "
                   "and replace the re-ranked questions' (without it such a run is not "
                   "VERIFIED: exit status 3)")
    v.add_argument("--rerun-seed", metavar="SEED", type=seed_int, default=None,
                   help="seed of the --rerun sample (default: a fresh random seed, printed on "
                   "the check line so the same questions can be re-run)")
    add_overlay_arg(v, "; for a run made with `run --gold-overlay FILE`: the same file "
                    "(checked by sha256), which re-derives the corrected gold (without it "
                    "such a run is not VERIFIED: exit status 3)")


def cmd_verify(args: argparse.Namespace) -> int:
    from engram_eval.runs import verify
    from engram_eval.runs.reader import read_summary
    from engram_eval.scoring.summary import format_summary

    if args.rerun < 0:
        raise EngramEvalError(f"verify: --rerun {args.rerun}: K must be 0 or more")
    rerun: dict[str, Any] = ({"rerun": args.rerun, "rerun_seed": args.rerun_seed}
                             if args.rerun else {})
    if args.questions:
        rerun["questions_file"] = args.questions
    if args.gold_overlay:
        rerun["gold_overlay"] = args.gold_overlay
    rep = verify.verify(args.result, args.dataset, sources_at=args.sources_at, **rerun)
    summ = read_summary(args.result) if rep.ok else None
    if summ is not None:
        print(f"fingerprint {summ['fingerprint']}")
        print(format_summary(summ))
    print(rep.format())
    print(rep.verdict())
    return rep.exit_code


def add_score(sub: Any) -> None:
    s = sub.add_parser("score", help="score any system's rankings on identical definitions")
    s.add_argument("rankings", help="JSONL of {question_id, ranked_session_ids}")
    s.add_argument("--dataset", required=True)
    s.add_argument("--protocol", action="append", dest="protocols")
    s.add_argument("--strict", action="store_true", help="error if a question has no ranking")
    s.add_argument("--output", type=output_file,
                   help="write the summary JSON here (must not exist)")
    add_overlay_arg(s)


def cmd_score(args: argparse.Namespace) -> int:
    from engram_eval.io import dump_json, exclusive_write
    from engram_eval.scoring.score import score_rankings, side_by_side
    from engram_eval.scoring.summary import TABLE_METRICS, format_summary

    summary, counts = score_rankings(args.rankings, args.dataset, args.protocols,
                                     strict=args.strict, gold_overlay=args.gold_overlay)
    print(", ".join(f"{k}={v}" for k, v in counts.items()))
    print(side_by_side(summary, TABLE_METRICS))
    print()
    print(format_summary(summary))
    if args.output:
        exclusive_write(args.output, dump_json({"counts": counts, **summary}))
    return 0


def add_export(sub: Any) -> None:
    e = sub.add_parser("export", help="export rankings without conversation text")
    e.add_argument("result")
    e.add_argument("--public", type=output_file,
                   help="write ids + scores JSONL here (must not exist)")
    e.add_argument("--official-log", type=output_file,
                   help="write a LongMemEval reference-layout log here")
    e.add_argument("--dataset", help="needed for --official-log")


def cmd_export(args: argparse.Namespace) -> int:
    from engram_eval.runs.export import export_official_log, export_public

    if not args.public and not args.official_log:
        raise EngramEvalError("export: give --public PATH and/or --official-log PATH")
    if args.public:
        print(f"wrote {export_public(args.result, args.public)} rows to {args.public}")
    if args.official_log:
        if not args.dataset:
            raise EngramEvalError("export --official-log needs --dataset")
        n = export_official_log(args.result, args.official_log, args.dataset)
        print(f"wrote {n} rows to {args.official_log}")
    return 0


def add_trec(sub: Any) -> None:
    tr = sub.add_parser("trec", help="export a run as a TREC run file and its gold as TREC "
                        "qrels (for trec_eval / ir_measures / ranx)")
    tr.add_argument("run", help="result rows (.jsonl or .jsonl.gz)")
    tr.add_argument("--trec-run", type=output_file,
                    help="write the run file here (must not exist)")
    tr.add_argument("--trec-qrels", type=output_file,
                    help="write the qrels here (must not exist)")
    tr.add_argument("--protocol", default=None,
                    help="gold and question selection (default: answerable, or locomo)")
    tr.add_argument("--tag", help="run tag (default: the retriever name)")
    tr.add_argument("--scores", choices=("auto", "stored", "rank"), default="auto",
                    help="score column: stored scores (must strictly decrease), n - rank + 1, "
                    "or auto (stored when possible)")
    add_sidecar_arg(tr)


def cmd_trec(args: argparse.Namespace) -> int:
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.runs.reader import read_run
    from engram_eval.runs.trec import export_run

    check_free(args, args.trec_run, args.trec_qrels)
    run = read_run(args.run)
    out = export_run(run, run_out=args.trec_run, qrels_out=args.trec_qrels,
                     protocol=args.protocol, tag=args.tag, scores=args.scores)
    print(f"{out.n_questions} questions; score column: {out.score_source} ({out.reason})")
    for path in (args.trec_run, args.trec_qrels):
        if path and not args.no_sidecar:
            write_derived_sidecar(path, generators=list(derived_sources("trec")),
                                  dataset=run.dataset(), runs=[run])
    if args.trec_run:
        print(f"wrote {args.trec_run}")
    if args.trec_qrels:
        print(f"wrote {args.trec_qrels} ({out.n_qrels} judgements)")
    return 0


def add_catalog(sub: Any) -> None:
    c = sub.add_parser("catalog", help="the catalogue of published results "
                       "(results/catalog.yaml): check it against the tree, or write it")
    c.add_argument("--root", default=".", help="the checkout (default: the current folder)")
    mode = c.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="list every difference between the catalogue and the tree (a "
                      "published file not listed, a listed one absent, a hash or a recorded "
                      "command that differs); exit status 1 when there is one")
    mode.add_argument("--write", action="store_true",
                      help="(re)write the catalogue from the tree: the sidecars, git history "
                      "(the commit that added each file) and PROVENANCE.md's contents table; "
                      "the written catalogue's archive and planned entries are kept")
    mode.add_argument("--archive", nargs="+", metavar="ID",
                      help="move these entries to the catalogue's archive: each names the "
                      "commit (HEAD) that holds its file, and the file and its companions are "
                      "removed from the working tree once git holds them byte for byte "
                      "(commit the removal and the catalogue next)")
    mode.add_argument("--retain", action="store_true",
                      help="the retention rule (engram_eval/provenance/retention.py): list "
                      "what it keeps (each entry with its reasons) and what it would archive, "
                      "results and shipped models; with --apply, archive them")
    c.add_argument("--apply", action="store_true",
                   help="with --retain: archive every entry and shipped model no current "
                   "claim keeps (commit the removal and the catalogue next)")
    mode.add_argument("--makefile", action="store_true",
                      help="write the Make rules of the catalogue (.publish/catalog.mk, which "
                      "the checkout's Makefile includes and remakes when the catalogue is newer): "
                      "a target per planned entry, its inputs as prerequisites, its recipe "
                      "engram-eval publish ID")
    mode.add_argument("--tables", action="store_true",
                      help="rewrite PROVENANCE.md's generated blocks (the defaults, each "
                      "section's figures, the tables of published files) from the catalogue, "
                      "the published files and the package defaults; --write and --archive "
                      "rewrite them too, and --check fails while one is stale")


def default_models() -> list[str]:
    """The shipped models the current defaults name: the pipeline's reranker and encoders
    (the people's chats' included) and production search's reranker."""
    from engram_eval.production.settings import ProductionSettings
    from engram_eval.retrieval.models import shipped_models
    from engram_eval.retrieval.settings import RetrievalSettings

    s = RetrievalSettings()
    names = [s.reranker_model, s.embedding_model,
             str(s.people_overrides.get("embedding_model", "")),
             ProductionSettings().reranker_model]
    known = set(shipped_models())
    return sorted({n for n in names if n in known})


def table_sources(root: Any, catalog: Any) -> Any:
    """What PROVENANCE.md's generated blocks read: the checkout, its catalogue, and the
    package defaults as the code holds them (chat and people retrieval settings, production
    search's)."""
    from dataclasses import asdict

    from engram_eval.production.settings import DEFAULT_CALIBRATION, ProductionSettings
    from engram_eval.provenance.tables import Sources
    from engram_eval.retrieval.settings import RetrievalSettings

    chat = RetrievalSettings()
    production = {**asdict(ProductionSettings()), "default_calibration": DEFAULT_CALIBRATION}
    return Sources(root, catalog, {"chat": asdict(chat.for_chat_roles(True)),
                                   "people": asdict(chat.for_chat_roles(False)),
                                   "production": production})


def _rewrite_tables(root: Any, catalog: Any) -> None:
    from engram_eval.io import atomic_write
    from engram_eval.provenance import tables as T

    doc = root / T.DOCUMENT
    if not doc.is_file():
        return
    text = doc.read_text(encoding="utf-8")
    new = T.rewrite(text, table_sources(root, catalog), str(doc))
    if new != text:
        atomic_write(doc, new)
        print(f"wrote {doc}: {len(T.blocks(new))} generated blocks")


def cmd_catalog(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engram_eval.io import atomic_write
    from engram_eval.provenance import catalog as C
    from engram_eval.provenance import retention as R
    from engram_eval.provenance.makefile import MAKEFILE, makefile

    root = Path(args.root)
    path = root / C.CATALOG
    if args.apply and not args.retain:
        raise EngramEvalError("--apply goes with --retain")
    if args.retain:
        return _retain(root, path, args.apply)
    if args.write or args.archive:
        written = C.load(path) if path.is_file() else {}
        cat = C.build(root, written.get("archive", []))
        if args.archive:
            cat = C.archive(root, cat, args.archive)
        cat["planned"] = written.get("planned", [])
        atomic_write(path, C.dump(cat))
        print(f"wrote {path}: {len(cat['entries'])} entries, {len(cat['archive'])} archived, "
              f"{len(cat['planned'])} planned")
        _rewrite_tables(root, cat)  # the catalogue just written (as it reads back)
        return 0
    if not path.is_file():
        raise EngramEvalError(f"{path}: no catalogue (write it with engram-eval catalog --write)")
    cat = C.load(path)
    if args.makefile:
        (root / MAKEFILE).parent.mkdir(exist_ok=True)
        atomic_write(root / MAKEFILE, makefile(cat))
        print(f"wrote {root / MAKEFILE}")
        return 0
    if args.tables:
        _rewrite_tables(root, cat)
        return 0
    problems = C.check(root, cat)
    if R.applies(root):  # the repository the retention rule's claims are about
        problems += R.problems(root, cat, default_models())
    doc = root / "PROVENANCE.md"
    if doc.is_file():
        from engram_eval.provenance import tables as T

        problems += T.stale(doc.read_text(encoding="utf-8"), table_sources(root, cat), str(doc))
    for line in problems:
        print(f"[FAIL] {line}")
    print("catalogue agrees with the tree" if not problems else
          f"{len(problems)} difference(s); rewrite with engram-eval catalog --write after "
          "checking them")
    return 1 if problems else 0


def _retain(root: Any, path: Any, apply: bool) -> int:
    """``catalog --retain [--apply]``: the rule's plan, and with ``apply`` the archive."""
    from engram_eval.io import atomic_write
    from engram_eval.provenance import catalog as C
    from engram_eval.provenance import retention as R

    if not path.is_file():
        raise EngramEvalError(f"{path}: no catalogue (write it with engram-eval catalog --write)")
    cat = C.load(path)
    plan = R.plan(root, cat, default_models())
    for line in R.report(plan, cat, root):
        print(line)
    if not apply:
        return 0
    cat = R.apply(root, cat, plan)
    atomic_write(path, C.dump(cat))
    _rewrite_tables(root, cat)
    print(f"wrote {path}: {len(cat['entries'])} entries, {len(cat['archive'])} archived; "
          f"the index of archived models {R.ARCHIVED_MODELS} (commit the removal and both "
          "files next)")
    return 0


def add_reproduce(sub: Any) -> None:
    r = sub.add_parser("reproduce", help="re-execute a catalogued result (results/catalog.yaml) "
                       "and compare it with the published file")
    r.add_argument("entry", metavar="ID", nargs="?", help="the catalogue id (a path under "
                   "results/, a run's without .jsonl.gz) or the file's path")
    r.add_argument("--kept", action="store_true",
                   help="instead of one ID: every published run the tree keeps (the retention "
                   "rule), re-executed with today's code and the recorded settings (a run that "
                   "used an archived model: at its commit, whose tree holds it); --questions "
                   "defaults to 3 here; a failure of a run that used the int8 people's encoder "
                   "is reported apart (PROVENANCE.md section 22, known defect), a run whose "
                   "model is not on this machine is listed as skipped")
    r.add_argument("--only", action="append", default=[], metavar="PATTERN",
                   help="with --kept: only the ids matching this fnmatch pattern (repeatable)")
    r.add_argument("--root", default=".", help="the checkout (default: the current folder)")
    r.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="a data file, or a folder searched for it, found by the sha256 the "
                   "entry records (repeatable)")
    r.add_argument("--here", action="store_true",
                   help="with this checkout's code (today's), not in a clean worktree of the "
                   "entry's commit")
    r.add_argument("--questions", type=int, metavar="K",
                   help="a run: re-rank K questions sampled with seed 0 (default: every "
                   "question of the run)")


def cmd_reproduce(args: argparse.Namespace) -> int:
    from engram_eval.runs.reproduce import reproduce, reproduce_kept

    if args.kept == bool(args.entry):
        raise EngramEvalError("give one ID, or --kept (every kept published run)")
    if args.only and not args.kept:
        raise EngramEvalError("--only goes with --kept")
    if args.kept:
        kept = reproduce_kept(args.root, data=args.data, here=args.here,
                              questions=args.questions or 3, only=args.only)
        passed = sorted(i for i, o in kept.outcomes.items() if o.ok)
        failed = sorted(i for i, o in kept.outcomes.items()
                        if not o.ok and i not in kept.known_defect)
        print(f"reproduced: {len(passed)} run(s)")
        for label, ids in (("NOT REPRODUCED", failed),
                           ("not reproduced, known defect (PROVENANCE.md section 22)",
                            list(kept.known_defect)),
                           ("skipped (a model not on this machine)", sorted(kept.skipped)),
                           ("not run", sorted(kept.errors))):
            if ids:
                print(f"{label}: {', '.join(ids)}")
        print("ALL KEPT RUNS REPRODUCED" if kept.ok and not kept.known_defect else
              "KEPT RUNS REPRODUCED BUT FOR THE KNOWN DEFECT" if kept.ok else
              "NOT ALL KEPT RUNS REPRODUCED")
        return 0 if kept.ok else 1
    out = reproduce(args.root, args.entry, data=args.data, here=args.here,
                    questions=args.questions)
    for line in out.lines:
        print(line)
    print("REPRODUCED" if out.ok else "NOT REPRODUCED")
    return out.exit_code


def add_publish(sub: Any) -> None:
    r = sub.add_parser("publish", help="make planned catalogue entries at HEAD (held-out runs "
                       "by the frozen protocol), verify them, move them into results/ and "
                       "catalogue them")
    r.add_argument("entries", nargs="+", metavar="ID", help="planned catalogue ids "
                   "(results/catalog.yaml, planned:); entries sharing a command with one "
                   "come along")
    r.add_argument("--root", default=".", help="the checkout (default: the current folder)")
    r.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="a data file, or a folder searched for it, found by the sha256 the "
                   "entry records (repeatable)")
    r.add_argument("--rerun", type=int, default=3, metavar="K",
                   help="questions verify re-ranks per run, seed 0 (default 3)")
    r.add_argument("--allow-changed-sources", action="store_true",
                   help="publish although the tracked sources differ from HEAD (the result "
                   "then re-executes from no commit: for trials, never for publication)")


def cmd_publish(args: argparse.Namespace) -> int:
    from engram_eval.provenance.publish import publish

    if args.rerun < 1:
        raise EngramEvalError("publish: --rerun must be at least 1")
    publish(args.root, args.entries, data=args.data, rerun=args.rerun,
            allow_changed_sources=args.allow_changed_sources)
    from pathlib import Path

    from engram_eval.provenance import catalog as C

    root = Path(args.root)  # PROVENANCE.md's generated blocks follow the new entries
    _rewrite_tables(root, C.load(root / C.CATALOG))
    return 0


COMMANDS = {"verify": (add_verify, cmd_verify), "score": (add_score, cmd_score),
            "export": (add_export, cmd_export), "trec": (add_trec, cmd_trec),
            "catalog": (add_catalog, cmd_catalog), "reproduce": (add_reproduce, cmd_reproduce),
            "publish": (add_publish, cmd_publish)}
