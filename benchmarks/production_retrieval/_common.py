"""Shared preamble of the production-retrieval scripts: settings options, source-root check."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def offline() -> None:
    from engram_eval.retrieval.models import set_offline_env

    set_offline_env()


def add_settings_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--settings", metavar="RECORD",
                   help="start from these recorded settings (a JSON settings mapping, or a "
                        "production output whose 'settings' it holds) instead of the package "
                        "defaults; the published runs' settings are "
                        "engram_eval/production/settings_v1.json. Options below override it.")
    p.add_argument("--embedding-model", help="embedding model name or path (pinned default: "
                   "all-MiniLM-L6-v2)")
    p.add_argument("--rerank", action="store_true",
                   help="confidence = sigmoid of a cross-encoder logit")
    p.add_argument("--reranker-model", help="cross-encoder name (HF cache) or path")
    p.add_argument("--calibration", help="offline calibration file (default: the packaged "
                   "engram_eval/production/calibration_v1.json)")
    p.add_argument("--limit", type=int, help="result limit (default 3)")
    p.add_argument("--min-confidence", type=float, help="confidence cut-off (default 0.6)")


def settings_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import dataclasses
    import json

    from engram_eval.errors import ConfigError
    from engram_eval.production.settings import ProductionSettings

    base = ProductionSettings()
    if getattr(args, "settings", None):
        try:
            from engram_eval.io import read_regular_text

            record = json.loads(read_regular_text(args.settings))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--settings {args.settings}: {e}") from None
        if isinstance(record, dict) and isinstance(record.get("settings"), dict):
            record = record["settings"]
        if not isinstance(record, dict):
            raise ConfigError(f"--settings {args.settings}: not a settings mapping")
        base = ProductionSettings.from_recorded(record)
    changes = {}
    for k in ("embedding_model", "reranker_model", "calibration", "limit", "min_confidence"):
        v = getattr(args, k, None)
        if v is not None:
            changes[k] = v
    if getattr(args, "rerank", False):
        changes["rerank"] = True
    return dataclasses.replace(base, **changes)


def check_source_root(root: str) -> Path:
    """The sources hashed must be the code that runs: ``ROOT/engram_eval`` must be the
    imported package."""
    import engram_eval
    from engram_eval.errors import ConfigError

    r = Path(root).resolve()
    pkg = Path(engram_eval.__file__).resolve().parent
    if (r / "engram_eval").resolve() != pkg:
        raise ConfigError(f"--source-root {root}: its engram_eval is not the imported package "
                          f"({pkg}); run from that tree or set PYTHONPATH to it")
    return r
