"""Commands that make datasets: ``split`` (deterministic tuning/held-out split),
``heldout list|forget`` (the held-out parts ``split`` registered, and forgetting one on the
record) and ``make-stress`` (a synthetic stress set with padded haystacks)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from engram_eval.cli._common import (
    add_sidecar_arg,
    check_free,
    finite_float,
    output_file,
    seed_int,
)
from engram_eval.io import printable
from engram_eval.provenance.sources import derived_sources


def add_split(sub: Any) -> None:
    sp = sub.add_parser("split", help="deterministic stratified tuning/held-out split of a "
                        "dataset (LongMemEval by question type, LoCoMo by conversation)")
    sp.add_argument("dataset", help="LongMemEval (.json/.json.gz) or LoCoMo file")
    sp.add_argument("--holdout", type=finite_float, required=True,
                    help="fraction held out, 0 < f < 1 (per question type; LoCoMo: of "
                    "conversations), rounded half up")
    sp.add_argument("--salt", required=True, help="salt of the sha256 ordering (recorded)")
    sp.add_argument("--output-dir", required=True,
                    help="directory for the parts, split_manifest.json and markers "
                    "(existing files are never overwritten); the held-out part is also "
                    "registered in the user's held-out registry "
                    "($ENGRAM_EVAL_HELDOUT_REGISTRY, else "
                    "$XDG_STATE_HOME/engram-eval/heldout_registry.json)")
    sp.add_argument("--compress", choices=("auto", "gzip", "none"), default="auto",
                    help="gzip the parts (auto: when the source is gzipped)")
    add_sidecar_arg(sp)


def cmd_split(args: argparse.Namespace) -> int:
    from engram_eval.data.split import MANIFEST_NAME
    from engram_eval.io import check_output_dir
    from engram_eval.provenance.derived import write_derived_sidecar
    from engram_eval.provenance.guard import guarded_split

    check_output_dir(args.output_dir)  # a link or a file there: one error, before any work
    check_free(args, os.path.join(args.output_dir, MANIFEST_NAME))
    # refuses held-out input, splits, registers the held-out part (provenance.guard)
    out, registry = guarded_split(args.dataset, holdout=args.holdout, salt=args.salt,
                                  output_dir=args.output_dir, compress=args.compress)
    if not args.no_sidecar:
        write_derived_sidecar(out.manifest_path, generators=list(derived_sources("split")),
                              dataset={"name": out.manifest["source"]["name"],
                                       "sha256": out.manifest["source"]["sha256"]},
                              files=[args.dataset, *out.part_paths.values()])
    m = out.manifest
    print(f"split {m['source']['name']} (sha256 {m['source']['sha256']}) "
          f"format={m['format']} unit={m['unit']} salt={m['salt']!r} holdout={m['holdout']}")
    for name, path in out.part_paths.items():
        part = m["parts"][name]
        types = ", ".join(f"{printable(t)}={n}" for t, n in part["by_type"].items())
        print(f"  {name}: {path} ({part['n_records']} records, {part['n_questions']} "
              f"questions; {types}) sha256 {part['sha256']}")
    print(f"manifest {out.manifest_path}")
    print(f"held-out part registered in {registry} (`engram-eval heldout list` shows it; "
          "`engram-eval heldout forget PART --reason TEXT` forgets it, on the record)")
    return 0


def add_make_stress(sub: Any) -> None:
    m = sub.add_parser("make-stress", help="pad a LongMemEval file's haystacks with other "
                       "questions' non-evidence sessions (a SYNTHETIC M-like stress set)")
    m.add_argument("source", help="LongMemEval file (.json or .json.gz)")
    m.add_argument("--sessions", type=int, required=True,
                   help="sessions per question after padding (e.g. 500)")
    m.add_argument("--seed", type=seed_int, required=True, help="sampling seed")
    m.add_argument("--limit", type=int, help="write only the first N questions (fillers are "
                   "still drawn from every question)")
    m.add_argument("--output", required=True, type=output_file,
                   help="output file (.json, or .json.gz for gzip); must not exist; its "
                   "sidecar is OUTPUT.meta.json")


def cmd_make_stress(args: argparse.Namespace) -> int:
    from engram_eval.data.stress import make_stress, meta_path
    from engram_eval.provenance.guard import refuse_heldout

    refuse_heldout(args.source, "a stress set is padded from tuning data only (its questions "
                   "would stay held-out questions)")
    meta = make_stress(args.source, args.output, sessions=args.sessions, seed=args.seed,
                       limit=args.limit,
                       echo=lambda m: print(m, file=sys.stderr))
    s = meta["sessions_per_question"]
    print(f"wrote {meta['n_questions']} questions to {args.output} (synthetic; sessions per "
          f"question min {s['min']}, max {s['max']}); sidecar {meta_path(args.output)}")
    print(f"sha256 {meta['output']['sha256']}")
    return 0


def add_heldout(sub: Any) -> None:
    h = sub.add_parser("heldout", help="see and forget the held-out parts `split` registered "
                       "in the user's held-out registry")
    hs = h.add_subparsers(dest="heldout_command", required=True)
    hs.add_parser("list", help="every registered part (file, hashes, split manifests, when "
                  "registered), the parts forgotten (when, why) and the held-out parts other "
                  "records hold")
    f = hs.add_parser("forget", help="stop holding out a registered part (recorded in the "
                      "registry with the time and the reason; no file is deleted)")
    f.add_argument("part", metavar="PART", help="the part's file, or its key as `heldout "
                   "list` shows it (the sha256, or at least its first 8 hex digits)")
    f.add_argument("--reason", required=True, help="why the part is no longer held out "
                   "(recorded)")


def _other_parts() -> list[str]:
    """Held-out parts known from records other than the registry (split manifests, markers
    and ledgers under the search roots): `heldout forget` does not apply to them."""
    from engram_eval.provenance.heldout import heldout_parts

    return [f"{part.sha256}  {part.name}\n  listed in {', '.join(part.where)}"
            for part in heldout_parts().values() if not part.registered]


def cmd_heldout(args: argparse.Namespace) -> int:
    from engram_eval.provenance import registry as R

    if args.heldout_command == "forget":
        return _forget(args)
    reg = R.registry_path()
    parts = R.registered_parts()
    print(f"held-out registry {reg}: {len(parts)} registered part(s)"
          + ("" if os.path.lexists(reg) else " (no registry file yet)"))
    for p in parts:
        print("\n".join(p.lines()))
    gone = R.forgotten_entries()
    if gone:
        print(f"forgotten: {len(gone)} part(s) (the registry's 'forgotten' list)")
        for g in gone:
            print(f"  {str(g.get('key'))[:16]}…  {g.get('file')}  forgotten "
                  f"{g.get('forgotten_at')}: {g.get('reason')}")
    other = _other_parts()
    print(f"held out by other records (split manifests, markers and ledgers under "
          f"results/, fixtures/production/ and $ENGRAM_EVAL_HELDOUT_ROOTS; `heldout forget` "
          f"does not apply): {len(other)} part(s)")
    for line in other:
        print(line)
    return 0


def _forget(args: argparse.Namespace) -> int:
    from engram_eval.provenance.guard import forget_part
    from engram_eval.provenance.heldout import heldout_parts

    done = forget_part(args.part, args.reason)
    p = done.part
    print(f"forgot held-out part {p.file} (sha256 {p.key}), registered "
          f"{p.registered_at or '(time not recorded)'}"
          + "".join(f", split manifest {m}" for m in p.manifests))
    print(f"recorded in {done.registry} (its 'forgotten' list, {done.forgotten_at}): "
          f"{done.reason}")
    print("no file was deleted; copies of the part and the file it was split from are no "
          "longer held out by the registry")
    for m in done.markers:
        print(f"note: the split marker {m} still marks "
              f"{m.name.removesuffix('.split.json')} itself as held out (it runs only under a "
              "frozen manifest); remove that split directory to stop it")
    still = heldout_parts().get(p.key)
    if still is not None:
        print(f"note: still held out by {', '.join(still.where)} (not the registry)")
    return 0


COMMANDS = {"split": (add_split, cmd_split), "heldout": (add_heldout, cmd_heldout),
            "make-stress": (add_make_stress, cmd_make_stress)}
