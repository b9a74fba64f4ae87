"""Figures (matplotlib, Agg backend): recall curves over k and per-type paired deltas.

Every figure carries a caption block naming the dataset, the split, the denominator (protocol
and its rule) and the settings; callers pass them in as :class:`FigureLabels`. Files are
rendered to memory and then written in one step: ``io.exclusive_write`` (temporary file, then
linked into place; an existing file is refused) or, with ``overwrite=True``,
``io.atomic_write`` (temporary file, then ``os.replace``). PNG metadata carries no software
version or date, so a figure's bytes depend on its content and the matplotlib build.

matplotlib is imported lazily; without it the functions raise ConfigError with the install
hint.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.io import already_exists

INSTALL_HINT = "plots need matplotlib: pip install 'matplotlib>=3.7'"
CURVE_FAMILIES = ("recall_any", "recall_all")


@dataclass(frozen=True)
class FigureLabels:
    dataset: str
    split: str
    denominator: str  # e.g. "answerable: questions with answer_session_ids, excluding _abs"
    settings: str  # retriever / comparison settings in words

    def caption(self) -> str:
        return (f"dataset: {self.dataset}   split: {self.split}\n"
                f"denominator: {self.denominator}\n"
                f"settings: {self.settings}")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigError(INSTALL_HINT) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, output: str | Path, overwrite: bool) -> Path:
    from engram_eval.io import atomic_write, exclusive_write, refuse_links

    out = Path(output)
    fmt = out.suffix.lstrip(".").lower() or "png"
    if fmt not in ("png", "svg", "pdf"):
        raise ConfigError(f"{out}: figure format must be .png, .svg or .pdf")
    refuse_links(out)  # even with overwrite: a link (dangling or not) is never replaced
    if not overwrite and out.exists():
        raise FileExistsError(already_exists(out))
    buf = io.BytesIO()
    meta: dict[str, Any] = {"png": {"Software": None}, "svg": {"Date": None},
                            "pdf": {"CreationDate": None, "ModDate": None}}[fmt]
    import matplotlib

    # SVG keeps its text as text (searchable labels), and no random ids/salt
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "engram-eval"}):
        fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", metadata=meta)
    data = buf.getvalue()
    (atomic_write if overwrite else exclusive_write)(out, data)
    return out


def _caption(fig: Any, labels: FigureLabels) -> None:
    fig.text(0.01, 0.005, labels.caption(), ha="left", va="bottom", fontsize=7.5,
             family="monospace", wrap=True)


def recall_curves(curves: Mapping[str, Mapping[str, Any]], ks: Sequence[int],
                  labels: FigureLabels, output: str | Path, *, title: str = "",
                  overwrite: bool = False) -> Path:
    """One panel per group (``overall`` first, then question types): recall_any@k and
    recall_all@k over ``ks`` with each family's random baseline dashed.

    ``curves[group]`` = ``{"n": int, "recall_any": [...], "recall_all": [...],
    "random_any": [...], "random_all": [...]}`` (values per k, in ``ks`` order).
    """
    plt = _pyplot()
    groups = list(curves)
    ncol = min(3, len(groups))
    nrow = (len(groups) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.2 * nrow + 1.0),
                             squeeze=False, sharey=True)
    colors = {"recall_any": "tab:blue", "recall_all": "tab:orange"}
    for ax, g in zip(axes.ravel(), groups, strict=False):
        c = curves[g]
        for fam in CURVE_FAMILIES:
            ax.plot(ks, c[fam], marker="o", ms=3, color=colors[fam], label=f"{fam}@k")
            ax.plot(ks, c["random_" + fam.split("_")[1]], ls="--", lw=1, color=colors[fam],
                    label=f"random {fam}@k")
        ax.set_xscale("log")
        ax.set_xticks(list(ks))
        ax.set_xticklabels([str(k) for k in ks])
        ax.minorticks_off()
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{g} (n={c['n']})", fontsize=9)
        ax.set_xlabel("k")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(groups):]:
        ax.set_visible(False)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(title or "recall over k per question type", fontsize=11)
    fig.tight_layout(rect=(0, 0.1 if nrow > 1 else 0.16, 1, 0.96))
    _caption(fig, labels)
    try:
        return _save(fig, output, overwrite)
    finally:
        plt.close(fig)


def delta_chart(report: Mapping[str, Any], metrics: Sequence[str], labels: FigureLabels,
                output: str | Path, *, title: str = "", overwrite: bool = False) -> Path:
    """One panel per metric: each group's delta (B - A) with its bootstrap interval; binary
    metrics annotate the McNemar p. A clustered report (entries with ``cluster_test``, from
    ``compare_runs(..., cluster="id-prefix")``) annotates every metric with the sign-flip p
    on cluster sums instead, the p that decided significance there. ``report`` is a
    :func:`compare.compare_runs` report."""
    plt = _pyplot()
    names = [m for m in metrics if m in report["metrics"]]
    if not names:
        raise ConfigError("delta chart: none of the requested metrics is in the report")
    groups = list(report["groups"])
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names) + 1.5,
                                                     0.45 * len(groups) + 2.4),
                             squeeze=False, sharey=True)
    ys = list(range(len(groups)))[::-1]
    for ax, name in zip(axes[0], names, strict=True):
        for y, g in zip(ys, groups, strict=True):
            e = report["groups"][g]["metrics"][name]
            lo, hi = e["ci"]
            color = "tab:green" if e["significant"] and e["delta"] > 0 else (
                "tab:red" if e["significant"] and e["delta"] < 0 else "tab:gray")
            ax.errorbar([e["delta"]], [y], xerr=[[e["delta"] - lo], [hi - e["delta"]]],
                        fmt="o", color=color, capsize=3, ms=4)
            if "cluster_test" in e:
                ax.annotate(f"p={e['cluster_test']['p']:.2g}", (hi, y), xytext=(4, 0),
                            textcoords="offset points", va="center", fontsize=6.5)
            elif e["binary"]:
                ax.annotate(f"p={e['mcnemar']['p']:.2g}", (hi, y), xytext=(4, 0),
                            textcoords="offset points", va="center", fontsize=6.5)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("delta (B - A)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys)
    axes[0][0].set_yticklabels([f"{g} (n={report['groups'][g]['n']})" for g in groups],
                               fontsize=8)
    conf = int(round(report["settings"]["confidence"] * 100))
    fig.suptitle(title or f"paired delta with {conf}% bootstrap interval", fontsize=10)
    fig.tight_layout(rect=(0, 0.16, 1, 0.93))
    _caption(fig, labels)
    try:
        return _save(fig, output, overwrite)
    finally:
        plt.close(fig)


# -- data for the curves ------------------------------------------------------------------------
def curves_from_rows(rows: Sequence[Mapping[str, Any]], protocol: str,
                     ks: Sequence[int] | None = None) -> dict[str, dict[str, Any]]:
    """Mean recall_any@k / recall_all@k per group from the rows' stored metrics, and the random
    baseline of each question's pool (``metrics.random_baseline(n_gold_in_pool, pool, k)``,
    the formula the run summary's ``random_baseline`` averages), averaged the same way."""
    from engram_eval.scoring.metrics import KS, random_baseline

    ks = list(ks or KS)
    per_group: dict[str, list[dict[str, float]]] = {"overall": []}
    for r in rows:
        m = r["metrics"].get(protocol) if isinstance(r.get("metrics"), dict) else None
        if m is None:
            continue
        gold = (r.get("gold") or {}).get(protocol) or []
        pool = len(r["ranked_session_ids"])
        n_gold = len(set(gold) & set(r["ranked_session_ids"]))
        vals: dict[str, float] = {}
        for k in ks:
            rb = random_baseline(n_gold, pool, k) if pool else {
                f"recall_any@{k}": 0.0, f"recall_all@{k}": 1.0 if n_gold == 0 else 0.0}
            vals[f"recall_any@{k}"] = float(m[f"recall_any@{k}"])
            vals[f"recall_all@{k}"] = float(m[f"recall_all@{k}"])
            vals[f"random_any@{k}"] = rb[f"recall_any@{k}"]
            vals[f"random_all@{k}"] = rb[f"recall_all@{k}"]
        per_group["overall"].append(vals)
        per_group.setdefault(r["question_type"], []).append(vals)
    if not per_group["overall"]:
        raise ConfigError(f"no row is scored under protocol {protocol!r}")
    out: dict[str, dict[str, Any]] = {}
    for g in ["overall", *sorted(k for k in per_group if k != "overall")]:
        vs = per_group[g]
        out[g] = {"n": len(vs)}
        for fam in ("recall_any", "recall_all", "random_any", "random_all"):
            out[g][fam] = [sum(v[f"{fam}@{k}"] for v in vs) / len(vs) for k in ks]
    return out


# -- figure labels ------------------------------------------------------------------------------
def split_label(dataset_name: str | None) -> str:
    """The split a dataset file name says it is (``engram-eval split`` names its parts)."""
    name = dataset_name or ""
    if ".heldout." in name:
        return "held-out part (engram-eval split)"
    if ".tune." in name:
        return "tuning part (engram-eval split)"
    return "full file"


def denominator_label(run: Any, protocol: str) -> str:
    """The protocol and its denominator rule (from the run's summary, else the package's)."""
    from engram_eval.scoring.summary import DENOMINATORS

    summ = (run.summary or {}).get("protocols", {}).get(protocol, {})
    den = summ.get("denominator")
    if den is None:
        den = DENOMINATORS.get(protocol)
    return f"{protocol}: {den}" if den else protocol


def run_settings_label(run: Any) -> str:
    """A run named by retriever, fingerprint and file."""
    fp = (run.fingerprint or "?")[:12]
    return f"{run.retriever or '?'} (fingerprint {fp}…, {run.path.name})"


def compare_stats_label(rep: Mapping[str, Any], conf: int) -> str:
    """The statistics named on the delta chart: what the compare report says was used."""
    st = rep["settings"]
    if "resampling_unit" not in st:  # question mode
        return (f"{conf}% paired bootstrap, {st['bootstrap']} resamples, seed {st['seed']}; "
                "exact McNemar")
    methods = {e["cluster_test"]["method"] for gv in rep["groups"].values()
               for e in gv["metrics"].values()}
    test = ("exact sign-flip test" if methods == {"exact sign-flip"} else
            "Monte-Carlo sign-flip test" if methods == {"monte-carlo sign-flip"} else
            "sign-flip test (exact, or Monte-Carlo above 16 clusters)")
    return (f"{conf}% cluster bootstrap by conversation (id prefix), {st['clusters']} clusters; "
            f"{test}; {st['bootstrap']} resamples, seed {st['seed']}")
