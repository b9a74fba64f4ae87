"""A tuned configuration without its rerank fields: the first stage to freeze and run with a
reranker named on the command line (a YAML value is explicit and would override the
reranker's card, :data:`engram_eval.retrieval.settings.CARD_FIELDS`).

    python -m engram_eval.analysis.first_stage results/lexical/tuned_first_stage.yaml \\
        results/lexical/heldout_config.yaml

(The catalogue entry ``lexical/heldout_config.yaml`` records the command; the output
must not exist.)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from engram_eval.io import exclusive_write


def rerank_fields() -> set[str]:
    """The fields dropped: the reranker card's fields, ``rerank`` and ``reranker_model``."""
    from engram_eval.retrieval.settings import CARD_FIELDS

    return {*CARD_FIELDS, "rerank", "reranker_model"}


def without_rerank_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` without :func:`rerank_fields`, in its order."""
    drop = rerank_fields()
    return {k: v for k, v in cfg.items() if k not in drop}


def first_stage_yaml(src: str, text: str) -> str:
    """The YAML of the configuration ``text`` (read from ``src``, named in the header)
    without its rerank fields, under a two-line header that says so."""
    import yaml

    cfg = yaml.safe_load(text)
    head = (f"# {src} without its rerank fields ({', '.join(sorted(rerank_fields()))}): they "
            "come from\n# the command line or the reranker's card. Load with engram-eval run "
            "--config\n")
    return head + yaml.safe_dump(without_rerank_fields(cfg), sort_keys=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m engram_eval.analysis.first_stage TUNED.yaml OUT.yaml",
              file=sys.stderr)
        return 2
    src, out = args
    with open(src, encoding="utf-8") as f:
        text = f.read()
    exclusive_write(out, first_stage_yaml(src, text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
