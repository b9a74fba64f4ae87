"""A shipped reranker: made by ``analysis.ship_reranker`` from a trained model (here the tiny
local cross-encoder), resolved by name with its card's hashes checked, its chosen settings
applied by ``--rerank`` unless given explicitly, and a reranked run over the tiny fixture
that ``verify --rerun`` re-executes. One clear error for an unknown name, a corrupted file,
a card whose hashes do not match, an unlisted file and a precision the stored graph lacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from engram_eval.analysis.ship_reranker import ship, ship_settings_version  # noqa: E402
from engram_eval.errors import ConfigError, ModelUnavailableError, ProvenanceError  # noqa: E402
from engram_eval.retrieval import models  # noqa: E402
from engram_eval.retrieval.models import (  # noqa: E402
    hash_model_dir,
    model_settings_card,
    resolve_model,
)
from engram_eval.retrieval.settings import GENERIC_RERANK, RetrievalSettings  # noqa: E402
from engram_eval.runs.config import RunConfig, resolve_model_settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
NAME = "engram-ce-tiny-test"
CHOSEN = {"reranker_backend": "onnx", "reranker_precision": "int8", "rerank_unit": "turn",
          "rerank_max_length": 64, "rerank_candidates": 4, "fusion_alpha": 0.8,
          "people_overrides": {"rerank": False}}


@pytest.fixture(scope="module")
def shipped_root(tiny_cross_encoder: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shipped-models root holding the tiny cross-encoder, shipped as int8 ONNX, beside a
    copy of the package's people's encoder (the default people_overrides name it)."""
    root = tmp_path_factory.mktemp("shipped")
    people = RunConfig().for_chat_roles(False).embedding_model
    shutil.copytree(Path(models.SHIPPED_ROOT) / people, root / people)
    files, _ = hash_model_dir(Path(tiny_cross_encoder))
    card = root / "train.card.json"  # the part of a train-reranker card that ship reads
    card.write_text(json.dumps({"kind": "engram-eval/reranker-card", "output_files": files}))
    ship(tiny_cross_encoder, card, root / NAME, name=NAME, version="1", settings=CHOSEN,
         chosen_by="a test")
    return root


@pytest.fixture
def shipped(shipped_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(models, "SHIPPED_ROOT", shipped_root)
    return shipped_root / NAME


@pytest.fixture
def damaged(shipped_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the shipped root to damage."""
    root = tmp_path / "root"
    shutil.copytree(shipped_root, root)
    monkeypatch.setattr(models, "SHIPPED_ROOT", root)
    return root / NAME


def test_ship_writes_the_graph_and_a_card_of_every_file(shipped: Path) -> None:
    card = json.loads((shipped / "card.json").read_text())
    assert card["role"] == "reranker" and card["settings"] == CHOSEN
    assert card["form"]["precision"] == "int8"
    assert card["form"]["recipe"]["quantization"]["weight_type"] == "QUInt8"
    assert sorted(card["files"]) == ["config.json", "export.json", "model.onnx",
                                     "tokenizer.json"]
    files, _ = hash_model_dir(shipped)
    assert {k: v for k, v in files.items() if k != "card.json"} == card["files"]


def test_ship_refuses_a_model_the_training_card_did_not_hash(tiny_cross_encoder: str,
                                                             tmp_path: Path) -> None:
    card = tmp_path / "train.card.json"
    card.write_text(json.dumps({"output_files": {"model.safetensors": "0" * 64}}))
    with pytest.raises(ProvenanceError, match="model.safetensors"):
        ship(tiny_cross_encoder, card, tmp_path / "x", name="x", version="1", settings={},
             chosen_by="")


def test_resolves_by_name_with_the_card_checked(shipped: Path) -> None:
    ref = resolve_model(NAME, "reranker")
    assert ref.source == f"package:engram-eval/{NAME}" and ref.path == str(shipped)
    assert "card.json" in ref.files_sha256  # the card (and its settings) is in the hash
    settings, label = model_settings_card(ref)
    assert settings == CHOSEN and label == f"card:{NAME}"


def test_unknown_name_is_one_error_listing_the_shipped_models(shipped: Path) -> None:
    with pytest.raises(ModelUnavailableError, match=f"Shipped with the package: {NAME}"):
        resolve_model("engram-ce-nonexistent-v9", "reranker")


def test_a_corrupted_file_is_named(damaged: Path) -> None:
    with (damaged / "model.onnx").open("r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelUnavailableError, match=r"model\.onnx: sha256 .* differs"):
        resolve_model(NAME, "reranker")


def test_a_card_whose_hashes_do_not_match_is_named(damaged: Path) -> None:
    card = json.loads((damaged / "card.json").read_text())
    card["files"]["tokenizer.json"] = "0" * 64
    (damaged / "card.json").write_text(json.dumps(card))
    with pytest.raises(ModelUnavailableError, match=r"tokenizer\.json: sha256 .* differs"):
        resolve_model(NAME, "reranker")


def test_a_missing_or_unlisted_file_is_named(damaged: Path) -> None:
    kept = (damaged / "config.json").read_bytes()
    (damaged / "config.json").unlink()
    with pytest.raises(ModelUnavailableError, match=r"config\.json: missing"):
        resolve_model(NAME, "reranker")
    (damaged / "config.json").write_bytes(kept)
    (damaged / "extra.json").write_text("{}")
    with pytest.raises(ModelUnavailableError, match=r"extra\.json: not listed"):
        resolve_model(NAME, "reranker")


def test_an_unreadable_card_is_named(damaged: Path) -> None:
    (damaged / "card.json").write_text("{not json")
    with pytest.raises(ModelUnavailableError, match=r"card\.json: cannot read"):
        resolve_model(NAME, "reranker")


def test_rerank_alone_takes_the_card_settings_and_records_where_from(shipped: Path) -> None:
    config = resolve_model_settings(RunConfig(rerank=True, reranker_model=NAME),
                                    {"rerank", "reranker_model"})
    for k, v in CHOSEN.items():
        if k != "people_overrides":
            assert getattr(config, k) == v
            assert config.settings_sources[k] == f"card:{NAME}"
    assert config.people_overrides["rerank"] is False
    assert config.settings_sources["people_overrides"].startswith(f"card:{NAME}")


def test_a_card_written_before_a_field_gets_the_value_it_was_chosen_under(
        shipped: Path, damaged: Path) -> None:
    """CHOSEN (like engram-ce-minilm-v1 to -v3) predates ``rerank_prior``: it was chosen with
    the rank prior, whatever the package default; a card that names the field applies it."""
    from engram_eval.retrieval.settings import LEGACY_VALUES

    assert "rerank_prior" not in CHOSEN and LEGACY_VALUES["rerank_prior"] == "rank"
    for default in ("rank", "score"):
        config = resolve_model_settings(
            RunConfig(rerank=True, reranker_model=NAME, rerank_prior=default),
            {"rerank", "reranker_model"})
        assert config.rerank_prior == "rank"
        assert config.settings_sources["rerank_prior"] == (f"card:{NAME} (chosen before the "
                                                           "field existed)")
    ship_settings_version(NAME, damaged.parent / "tiny-score", name="tiny-score", version="2",
                          settings={**CHOSEN, "rerank_prior": "score"}, chosen_by="a test")
    config = resolve_model_settings(RunConfig(rerank=True, reranker_model="tiny-score"),
                                    {"rerank", "reranker_model"})
    assert config.rerank_prior == "score"
    assert config.settings_sources["rerank_prior"] == "card:tiny-score"
    explicit = resolve_model_settings(
        RunConfig(rerank=True, reranker_model="tiny-score", rerank_prior="rank"),
        {"rerank", "reranker_model", "rerank_prior"})
    assert (explicit.rerank_prior, explicit.settings_sources["rerank_prior"]) == ("rank",
                                                                                  "explicit")


def test_explicit_values_win_over_the_card(shipped: Path) -> None:
    config = resolve_model_settings(
        RunConfig(rerank=True, reranker_model=NAME, fusion_alpha=0.3, rerank_candidates=2),
        {"rerank", "reranker_model", "fusion_alpha", "rerank_candidates"})
    assert config.fusion_alpha == 0.3 and config.rerank_candidates == 2
    assert config.settings_sources["fusion_alpha"] == "explicit"
    assert config.rerank_unit == "turn"


def test_given_people_overrides_keep_the_cards_other_people_keys(shipped: Path) -> None:
    # a tuned YAML names the people's fusion, not their rerank: the card's rerank-off holds
    given = {"normalisation": "minmax", "weight_bm25_turn": 0.3}
    config = resolve_model_settings(
        RunConfig(rerank=True, reranker_model=NAME, people_overrides=dict(given)),
        {"rerank", "reranker_model", "people_overrides"})
    assert config.people_overrides == {**given, "rerank": False}
    assert config.settings_sources["people_overrides"] == f"explicit, + card:{NAME} for rerank"
    # a people key the user gave wins over the card's
    config = resolve_model_settings(
        RunConfig(rerank=True, reranker_model=NAME, people_overrides={"rerank": True}),
        {"rerank", "reranker_model", "people_overrides"})
    assert config.people_overrides == {"rerank": True}
    assert config.settings_sources["people_overrides"] == "explicit"


def test_a_model_without_a_card_gets_the_generic_rule(tiny_cross_encoder: str) -> None:
    config = resolve_model_settings(
        RunConfig(rerank=True, reranker_model=tiny_cross_encoder, rerank_unit="turn",
                  fusion_alpha=0.5),
        {"rerank", "reranker_model", "rerank_unit"})
    assert config.rerank_unit == "turn"  # explicit
    assert config.fusion_alpha == GENERIC_RERANK["fusion_alpha"]  # not given: generic
    assert config.settings_sources["fusion_alpha"].startswith("generic")


def test_no_rerank_changes_nothing() -> None:
    config = RunConfig(rerank=False)
    assert resolve_model_settings(config, set()) == config


def test_the_stored_precision_only(shipped: Path) -> None:
    from engram_eval.retrieval.hybrid import HybridRetriever

    with pytest.raises(ConfigError, match="stored as an ONNX int8 graph"):
        HybridRetriever(RetrievalSettings(rerank=True, reranker_model=NAME,
                                          reranker_backend="onnx", reranker_precision="fp32"))
    with pytest.raises(ConfigError, match="stored as an ONNX int8 graph"):
        HybridRetriever(RetrievalSettings(rerank=True, reranker_model=NAME,
                                          reranker_backend="sentence_transformers"))


def _run(config: RunConfig, dataset: Path, out: Path):  # type: ignore[no-untyped-def]
    from engram_eval.runs import runner

    return runner.run(config, dataset, out, echo=lambda m: None)


def test_a_reranked_run_reexecutes_under_verify(shipped: Path, tiny_embedding_model: str,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_eval.runs.reader import read_run
    from engram_eval.runs.verify import verify

    monkeypatch.setenv("ENGRAM_EVAL_CACHE", str(tmp_path / "cache"))  # where the rerun exports

    config = resolve_model_settings(
        RunConfig(rerank=True, reranker_model=NAME, embedding_model=tiny_embedding_model,
                  progress=False, cache_dir=str(tmp_path / "cache")),
        {"rerank", "reranker_model", "embedding_model"})
    out = tmp_path / "r.jsonl"
    _run(config, DATASET, out)
    run = read_run(out)
    assert run.sidecar["config_recorded"]["settings_sources"]["fusion_alpha"] == f"card:{NAME}"
    assert run.sidecar["config"]["rerank_unit"] == "turn"
    assert any(m["name"] == NAME and m["source"] == f"package:engram-eval/{NAME}"
               for m in run.sidecar["models"])
    assert all(any(t.get("reranked") for t in row["trace"]["sessions"]) for row in run.rows)
    rep = verify(out, DATASET, rerun=3, rerun_seed=0)
    assert rep.verified, rep.format()


def test_people_chats_are_not_reranked_when_the_card_says_so(shipped: Path,
                                                             tiny_embedding_model: str,
                                                             tmp_path: Path) -> None:
    from engram_eval.runs.reader import read_run

    config = resolve_model_settings(
        RunConfig(rerank=True, reranker_model=NAME, embedding_model=tiny_embedding_model,
                  progress=False, use_cache=False), {"rerank", "reranker_model"})
    out = tmp_path / "l.jsonl"
    _run(config, LOCOMO, out)
    rows = read_run(out).rows
    assert rows and not any(t.get("reranked") for row in rows for t in row["trace"]["sessions"])


# --------------------------------------------------------------------------- the real one
SHIPPED = "engram-ce-minilm-v4"  # the package default (PROVENANCE.md section 20)


@pytest.mark.parametrize("name", ["engram-ce-minilm-v3", "engram-ce-minilm-v4"])
def test_the_shipped_reranker_resolves_with_its_card(name: str) -> None:
    """Every shipped version resolves with its card (v4, the default, a card over v3's
    weights)."""
    ref = resolve_model(name, "reranker")
    settings, _ = model_settings_card(ref)
    assert settings is not None and settings["rerank_unit"] == "turn"
    card = json.loads((Path(ref.path) / "card.json").read_text())
    assert card["training_card"]["part"]["split_part"] == "tune"  # never a held-out part
    size = sum(p.stat().st_size for p in Path(ref.path).iterdir())
    assert size <= 50 * 2**20  # the repository budget of issue 26


@pytest.mark.parametrize("name", ["engram-ce-minilm-v1", "engram-ce-minilm-v2"])
def test_an_archived_reranker_by_name_is_one_error_naming_the_commit_that_holds_it(name: str
                                                                                   ) -> None:
    """The retention rule archived the superseded versions (issue 46): resolving one by name
    names the commit whose tree holds it and how to get it, and the commit does hold its card
    (a run that used it re-executes there: ``engram-eval reproduce ID``)."""
    import subprocess

    from engram_eval.retrieval.models import archived_model

    record = archived_model(name)
    assert record is not None
    at = str(record["at"])
    with pytest.raises(ModelUnavailableError, match=rf"{name}' is archived.*commit {at[:12]} "
                       rf"holds it at engram_eval/models/{name}.*engram-eval reproduce ID.*"
                       rf"git restore --source {at[:12]}"):
        resolve_model(name, "reranker")
    shown = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e",
                            f"{at}:engram_eval/models/{name}/card.json"], check=False)
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                      capture_output=True, text=True, check=False).stdout.strip() == "false":
        assert shown.returncode == 0


def test_every_shipped_model_together_stays_within_the_budget() -> None:
    """Issue 26's budget of 50 MB for the rerankers, all versions together (a settings-only
    version adds its card alone), raised by issue 42 to 100 MB for every shipped model, the
    dense encoder included."""
    from engram_eval.retrieval.models import SHIPPED_ROOT, read_card

    def size(d: Path) -> int:
        return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())

    dirs = [d for d in Path(SHIPPED_ROOT).iterdir() if d.is_dir()]
    rerankers = [d for d in dirs if read_card(d).get("role") == "reranker"]
    assert sum(size(d) for d in rerankers) <= 50 * 10**6
    assert sum(size(d) for d in dirs) <= 100 * 10**6


def test_rerank_runs_offline_on_the_fixture_and_verifies(tmp_path: Path) -> None:
    """The README's `--rerank` line on a fresh machine: no network, an empty cache, then
    `verify --rerun 3` prints VERIFIED."""
    import subprocess
    import sys

    from tiny_models import offline_env

    env = offline_env(tmp_path)
    env["ENGRAM_EVAL_CACHE"] = str(tmp_path / "cache")
    out = tmp_path / "x.jsonl"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks/longmemeval/run.py"),
                          str(DATASET), "--rerank", "--output", str(out), "--no-progress"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"rerank {SHIPPED} (onnx int8, unit turn" in run.stdout
    check = subprocess.run([sys.executable, "-m", "engram_eval.cli.main", "verify", str(out),
                            "--dataset", str(DATASET), "--rerun", "3"],
                           env=env, capture_output=True, text=True, timeout=600)
    assert check.returncode == 0 and "VERIFIED" in check.stdout, check.stdout[-2000:]


def test_the_defaults_are_the_shipped_reranker_with_its_card() -> None:
    """`--rerank` alone, `run` with no option and a library `RetrievalSettings()` all mean the
    measured configuration: the shipped model with the settings its card chose."""
    ref = resolve_model(SHIPPED, "reranker")
    card, _ = model_settings_card(ref)
    assert card is not None
    d = RetrievalSettings()
    assert d.rerank and d.reranker_model == SHIPPED
    for k, v in card.items():
        if k == "people_overrides":
            assert all(d.people_overrides[x] == y for x, y in v.items())
        else:
            assert getattr(d, k) == v, k
    assert d.for_chat_roles(False).rerank is False  # people's chats: off
    explicit = resolve_model_settings(RunConfig(), {"rerank"})
    assert all(src.startswith(f"card:{SHIPPED}") for src in explicit.settings_sources.values())


def test_a_settings_only_version_uses_its_base_weights_and_its_own_settings(
        damaged: Path) -> None:
    """``ship_settings_version``: a new name whose card changes the settings only; it
    resolves to the base model's files (checked against its card's hashes), applies its own
    settings, and hashes its own card, so its runs are told apart from the base's; the base
    still resolves as before."""
    root = damaged.parent
    base = resolve_model(NAME, "reranker")
    v2 = {**CHOSEN, "rerank_candidates": 3, "fusion_alpha": 0.9}
    card = ship_settings_version(NAME, root / "tiny-v2", name="tiny-v2", version="2",
                                 settings=v2, chosen_by="a test")
    assert card["weights_from"] == NAME and card["files"] == json.loads(
        (damaged / "card.json").read_text())["files"]
    assert sorted(p.name for p in (root / "tiny-v2").iterdir()) == ["card.json"]
    ref = resolve_model("tiny-v2", "reranker")
    assert ref.path == str(damaged) and ref.name == "tiny-v2"
    assert ref.files_sha256["version/card.json"] == models.file_sha256(root / "tiny-v2" /
                                                                        "card.json")
    assert ref.sha256 != base.sha256
    assert model_settings_card(ref) == (v2, "card:tiny-v2")
    assert model_settings_card(resolve_model(NAME, "reranker")) == (CHOSEN, f"card:{NAME}")
    with pytest.raises(ProvenanceError, match="exists"):
        ship_settings_version(NAME, root / "tiny-v2", name="tiny-v2", version="2",
                              settings=v2, chosen_by="")
    with pytest.raises(ConfigError, match="settings-only"):
        ship_settings_version("tiny-v2", root / "v3", name="v3", version="3", settings=v2,
                              chosen_by="")
    # a damaged base is named through the version; a file beside the version's card too
    (root / "tiny-v2" / "model.onnx").write_bytes(b"x")
    with pytest.raises(ModelUnavailableError, match="holds no file but its card"):
        resolve_model("tiny-v2", "reranker")
    (root / "tiny-v2" / "model.onnx").unlink()
    (damaged / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelUnavailableError, match=r"tokenizer\.json: sha256 .* differs"):
        resolve_model("tiny-v2", "reranker")


def test_a_settings_only_version_reranks_like_its_base_with_its_settings(
        damaged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_eval.cli import main as cli

    monkeypatch.setenv("ENGRAM_EVAL_CACHE", str(tmp_path / "cache"))
    root = damaged.parent
    ship_settings_version(NAME, root / "tiny-v2", name="tiny-v2", version="2",
                          settings={**CHOSEN, "rerank_candidates": 3}, chosen_by="a test")
    out = tmp_path / "v2.jsonl"
    assert cli.main(["run", str(DATASET), "--output", str(out), "--rerank",
                     "--reranker-model", "tiny-v2", "--limit", "2"]) == 0
    meta = json.loads((tmp_path / "v2.jsonl.metadata.json").read_text())
    assert meta["config"]["rerank_candidates"] == 3
    assert cli.main(["verify", str(out), "--dataset", str(DATASET), "--rerun", "2"]) == 0


def test_the_defaults_are_the_published_first_stage_and_reranker() -> None:
    """The package defaults are the configuration PROVENANCE.md section 18 froze and ran on
    the held-out parts (results/turn_top_m/topm_heldout_config.yaml, every field) with the
    reranker section 15 kept; people's chats take that file's people_overrides plus the
    card's, and since section 22 the people's encoder and turn weight chosen with it."""
    import yaml

    from engram_eval.runs.config import RunConfig

    frozen = yaml.safe_load((ROOT / "results/turn_top_m/topm_heldout_config.yaml").read_text())
    d = RunConfig()
    for k, v in frozen.items():
        if k == "people_overrides":
            assert {x: d.people_overrides[x] for x in v} == v
        else:
            assert getattr(d, k) == v, k
    assert d.reranker_model == SHIPPED and d.rerank
    people = d.for_chat_roles(False)
    assert (people.rerank, people.lexical_speaker, people.normalisation) == (False, "prefix",
                                                                             "minmax")
