"""A shipped dense encoder (issue 42): made by ``analysis.ship_encoder`` from a
``train-encoder`` output (here a tiny local model trained two steps), resolved offline by name
with its card's hashes checked, run by the ``onnx`` embedding backend at its stored precision
with its vectors cached under its own hash, and a run with it that ``verify --rerun``
re-executes. One clear error for a corrupted file, a card whose hashes do not match and a
precision the stored graph lacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from engram_eval.analysis.ship_encoder import ship_encoder  # noqa: E402
from engram_eval.analysis.train_encoder import EncoderTrainSettings, train_encoder  # noqa: E402
from engram_eval.cli import main as cli  # noqa: E402
from engram_eval.errors import ConfigError, ModelUnavailableError, ProvenanceError  # noqa: E402
from engram_eval.retrieval import models  # noqa: E402
from engram_eval.retrieval.models import hash_model_dir, resolve_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "fixtures" / "longmemeval_tiny.json"
NAME = "engram-minilm-tiny-test"


@pytest.fixture(scope="module")
def trained(tiny_embedding_model: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("enc")
    run = d / "run.jsonl"
    assert cli.main(["run", str(DATASET), "--retriever", "bm25", "--no-progress",
                     "--output", str(run)]) == 0
    train_encoder(DATASET, run, d / "model",
                  EncoderTrainSettings(base_model=tiny_embedding_model, max_steps=2,
                                       batch_size=4, max_seq_length=32))
    return d / "model"


@pytest.fixture(scope="module")
def shipped_root(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shipped-enc")
    ship_encoder(trained, Path(str(trained) + ".card.json"), root / NAME, name=NAME,
                 version="1", chosen_by="a test")
    return root


@pytest.fixture
def shipped(shipped_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(models, "SHIPPED_ROOT", shipped_root)
    return shipped_root / NAME


@pytest.fixture
def damaged(shipped_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "root"
    shutil.copytree(shipped_root, root)
    monkeypatch.setattr(models, "SHIPPED_ROOT", root)
    return root / NAME


def test_ship_writes_the_graph_and_a_card_of_every_file(shipped: Path, trained: Path) -> None:
    card = json.loads((shipped / "card.json").read_text())
    assert card["role"] == "embedding" and card["form"]["precision"] == "int8"
    assert card["training_card"] == json.loads(Path(str(trained) + ".card.json").read_text())
    assert sorted(card["files"]) == ["config.json", "export.json", "model.onnx",
                                     "tokenizer.json"]
    export = json.loads((shipped / "export.json").read_text())
    assert export["pooling"] == "mean" and export["dim"] == 32
    files, _ = hash_model_dir(shipped)
    assert {k: v for k, v in files.items() if k != "card.json"} == card["files"]
    with pytest.raises(ProvenanceError, match="never overwrites"):
        ship_encoder(trained, Path(str(trained) + ".card.json"), shipped, name=NAME,
                     version="1", chosen_by="")


def test_ship_refuses_a_model_its_card_did_not_hash(trained: Path, tmp_path: Path) -> None:
    card = json.loads(Path(str(trained) + ".card.json").read_text())
    card["output_files"]["model.safetensors"] = "0" * 64
    forged = tmp_path / "forged.card.json"
    forged.write_text(json.dumps(card))
    with pytest.raises(ProvenanceError, match="model.safetensors"):
        ship_encoder(trained, forged, tmp_path / "x", name="x", version="1", chosen_by="")
    assert not (tmp_path / "x").exists()


def test_resolves_offline_by_name_and_encodes_like_its_source(shipped: Path,
                                                              trained: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from engram_eval.retrieval.embeddings import make_embedder
    from engram_eval.retrieval.onnx_export import prepare_embedding_backend

    ref = resolve_model(NAME, "embedding")
    assert ref.source == f"package:engram-eval/{NAME}" and ref.path == str(shipped)
    assert prepare_embedding_backend("onnx", ref, "int8") is None  # the graph as it is
    emb = make_embedder("onnx", ref, "int8", 8)
    texts = ["my puppy is a border collie", "what breed is my puppy", "the weather today"]
    got = emb.encode(texts)
    want = SentenceTransformer(str(trained), device="cpu").encode(texts,
                                                                  normalize_embeddings=True)
    cos = (got * want).sum(axis=1)
    assert got.shape == want.shape and float(cos.min()) > 0.95  # int8 of the same model


def test_the_stored_precision_only(shipped: Path) -> None:
    from engram_eval.retrieval.onnx_export import prepare_embedding_backend

    ref = resolve_model(NAME, "embedding")
    with pytest.raises(ConfigError, match="stored as an ONNX int8 graph"):
        prepare_embedding_backend("onnx", ref, "fp32")
    with pytest.raises(ConfigError, match="--embedding-precision int8"):
        prepare_embedding_backend("sentence_transformers", ref, "fp32")


def test_a_corrupted_file_or_a_wrong_hash_is_named(damaged: Path) -> None:
    with (damaged / "model.onnx").open("r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ModelUnavailableError, match=r"model\.onnx: sha256 .* differs"):
        resolve_model(NAME, "embedding")


def test_a_card_with_a_wrong_hash_or_role_is_named(damaged: Path) -> None:
    card = json.loads((damaged / "card.json").read_text())
    card["files"]["tokenizer.json"] = "0" * 64
    (damaged / "card.json").write_text(json.dumps(card))
    with pytest.raises(ModelUnavailableError, match=r"tokenizer\.json: sha256 .* differs"):
        resolve_model(NAME, "embedding")
    with pytest.raises(ModelUnavailableError, match="not a reranker model"):
        resolve_model(NAME, "reranker")


def test_a_run_with_the_shipped_encoder_records_it_and_reexecutes(
        shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_eval.runs.reader import read_run
    from engram_eval.runs.verify import verify

    cache = tmp_path / "cache"
    monkeypatch.setenv("ENGRAM_EVAL_CACHE", str(cache))
    out = tmp_path / "r.jsonl"
    assert cli.main(["run", str(DATASET), "--embedding-model", NAME, "--embedding-precision",
                     "int8", "--no-rerank", "--no-progress", "--cache-dir", str(cache),
                     "--output", str(out)]) == 0
    run = read_run(out)
    ref = resolve_model(NAME, "embedding")
    recorded = [m for m in run.sidecar["models"] if m["name"] == NAME]
    assert recorded and recorded[0]["sha256"] == ref.sha256
    assert not any(m["role"] == "embedding-onnx" for m in run.sidecar["models"])
    rep = verify(out, DATASET, rerun=3, rerun_seed=0)
    assert rep.verified, rep.format()


def test_the_cache_keys_vectors_by_the_models_hash(shipped: Path, tiny_embedding_model: str
                                                   ) -> None:
    from engram_eval.retrieval.embeddings import CachedEncoder, make_embedder

    ours = CachedEncoder(make_embedder("onnx", resolve_model(NAME, "embedding"), "int8", 8),
                         backend="onnx")
    base = CachedEncoder(make_embedder("sentence_transformers",
                                       resolve_model(tiny_embedding_model, "embedding"),
                                       "fp32", 8), backend="onnx")
    assert ours.key("same text") != base.key("same text")
    assert resolve_model(NAME, "embedding").sha256 in ours._prefix


# --------------------------------------------------------------------------- the real one
SHIPPED = "engram-minilm-conv-v1"  # PROVENANCE.md section 22


def test_the_shipped_encoder_resolves_offline_with_its_card() -> None:
    """The encoder trained on both tune parts resolves by name from the package, its card's
    hashes checked; its training card names tuning parts only."""
    ref = resolve_model(SHIPPED, "embedding")
    card = json.loads((Path(ref.path) / "card.json").read_text())
    assert card["role"] == "embedding" and card["form"]["precision"] == "int8"
    parts = card["training_card"]["parts"]
    assert len(parts) == 2 and all(p["split_part"] == "tune" for p in parts)
    assert card["training_card"]["excluded_questions"]["fold"] is None


# ------------------------------------------------------------ one encoder per structure
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"
PEOPLE_ENCODER = {"embedding_model": NAME, "embedding_backend": "onnx",
                  "embedding_precision": "int8"}


def _rows(path: Path) -> list[tuple[str, list[str], list[float]]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["question_id"], r["ranked_session_ids"], r["scores"]) for r in rows]


def _structure_run(tmp: Path, name: str, data: Path, config: dict, *flags: str) -> Path:
    import yaml

    cfg = tmp / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    out = tmp / f"{name}.jsonl"
    assert cli.main(["run", str(data), "--config", str(cfg), "--no-rerank", "--no-progress",
                     "--cache-dir", str(tmp / "cache"), *flags, "--output", str(out)]) == 0
    return out


def test_people_chats_take_their_own_encoder(shipped: Path, tiny_embedding_model: str,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``people_overrides`` naming an encoder: a people's haystack is encoded by it exactly as
    a run naming it for every haystack, a chat haystack by the run's own encoder exactly as a
    run without the override; both models are recorded, each loaded only where used, and
    ``verify --rerun`` re-executes the run."""
    from engram_eval.runs.reader import read_run
    from engram_eval.runs.verify import verify

    monkeypatch.setenv("ENGRAM_EVAL_CACHE", str(tmp_path / "cache"))  # the rerun's exports
    base = {"embedding_model": tiny_embedding_model, "people_overrides": {}}
    split = {"embedding_model": tiny_embedding_model, "people_overrides": PEOPLE_ENCODER}
    people = _structure_run(tmp_path, "people", LOCOMO, split)
    people_alone = _structure_run(tmp_path, "people_alone", LOCOMO,
                                  {**PEOPLE_ENCODER, "people_overrides": {}})
    assert _rows(people) == _rows(people_alone)
    chat = _structure_run(tmp_path, "chat", DATASET, split)
    assert _rows(chat) == _rows(_structure_run(tmp_path, "chat_alone", DATASET, base))
    shipped_sha = resolve_model(NAME, "embedding").sha256
    tiny_sha = resolve_model(tiny_embedding_model, "embedding").sha256
    for out in (people, chat):
        meta = read_run(out).sidecar
        assert [m["sha256"] for m in meta["models"] if m["role"] == "embedding"] == [
            tiny_sha, shipped_sha]
    # the people run never encoded with the chat encoder, the chat run never with people's
    people_stats = read_run(people).sidecar["runs"][-1]["model_stats"]
    chat_stats = read_run(chat).sidecar["runs"][-1]["model_stats"]
    assert "embedding_people" in people_stats and "embedding" not in people_stats
    assert "embedding" in chat_stats and "embedding_people" not in chat_stats
    rep = verify(people, LOCOMO, rerun=3, rerun_seed=0)
    assert rep.verified, rep.format()


def test_an_encoder_given_explicitly_serves_every_structure(shipped: Path,
                                                            tiny_embedding_model: str) -> None:
    """The default people's encoder applies only where no encoder was given: a CLI flag or a
    top-level YAML key naming one drops the encoder fields of ``people_overrides`` (the other
    people settings stay); ``people_overrides`` given too says what people's chats use."""
    from engram_eval.runs.config import RunConfig, resolve_model_settings

    over = {"weight_bm25_user": 1.0, **PEOPLE_ENCODER}
    cfg = RunConfig(people_overrides=over, rerank=False)
    kept = resolve_model_settings(cfg, set())
    assert kept.people_overrides == over
    given = resolve_model_settings(cfg.replace(embedding_model=tiny_embedding_model),
                                   {"embedding_model"})
    assert given.people_overrides == {"weight_bm25_user": 1.0}
    assert given.for_chat_roles(False).embedding_model == tiny_embedding_model
    both = resolve_model_settings(cfg, {"embedding_precision", "people_overrides"})
    assert both.people_overrides == over


def test_a_people_encoder_is_checked_when_the_run_is_built(shipped: Path,
                                                          tiny_embedding_model: str,
                                                          tmp_path: Path) -> None:
    """A people's encoder at a precision its stored graph lacks, or one that does not
    resolve, is one clear error before any output is claimed."""
    from engram_eval.retrieval.holder import ModelHolder
    from engram_eval.retrieval.settings import RetrievalSettings

    bad = RetrievalSettings(embedding_model=tiny_embedding_model,
                            people_overrides={**PEOPLE_ENCODER, "embedding_precision": "fp32"})
    with pytest.raises(ConfigError, match="stored as an ONNX int8 graph"):
        ModelHolder(bad)
    missing = RetrievalSettings(embedding_model=tiny_embedding_model,
                                people_overrides={"embedding_model": str(tmp_path / "none")})
    with pytest.raises(ModelUnavailableError):
        ModelHolder(missing)
    with pytest.raises(ConfigError, match="people_overrides"):
        RetrievalSettings(people_overrides={"embedding_precision": "int4"})
    holder = ModelHolder(RetrievalSettings(embedding_model=tiny_embedding_model,
                                           people_overrides={}, rerank=False))
    assert not holder.people_encoder_differs()
    assert [m.role for m in holder.models()] == ["embedding", "embedding-onnx"]
