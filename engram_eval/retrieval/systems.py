"""Memory systems from outside the package, run through the same runner as a built-in retriever.

A *system* is named by ``--retriever``:

* an entry point of that name in group :data:`ENTRY_POINT_GROUP` (``engram_eval.retrievers``)
  of an installed distribution (``[project.entry-points."engram_eval.retrievers"]`` in its
  ``pyproject.toml``: ``NAME = "module:factory"``), found with :mod:`importlib.metadata`;
* ``py:MODULE:FACTORY``: ``FACTORY`` of an importable ``MODULE``;
* ``http`` with ``--system-url URL``: a server speaking the JSON protocol below
  (:mod:`engram_eval.retrieval.http_system`).

The factory is called with the system's settings (a mapping: ``--system-config FILE``) and
returns an object with two methods taking and returning JSON-shaped values (the HTTP protocol
sends the same documents; schema ``engram_eval/schemas/system.schema.json``):

* ``index(haystack)``: ``{"haystack_id", "settings", "sessions": [{"id", "date", "turns":
  [{"role", "content"}]}]}``, one question's corpus, replacing whatever was indexed before;
* ``search(query)``: ``{"haystack_id", "question": {"id", "text", "date"}}`` -> the ranking,
  best first: a list of session ids, or of ``{"id", "score"}`` (scores optional, all or none,
  non-increasing), or ``{"ranking": [...]}``.

What the system sees (:class:`SystemRetriever`): by default each session under an opaque id
(``s`` + 16 hex of sha256 of ``id_salt``, the question id and the session id), the question
under an opaque id too, and the sessions in an order shuffled by a permutation seeded with
``id_salt``, ``id_seed`` and the question id: neither an id's text (LongMemEval_S's evidence
ids start with ``answer_``) nor the haystack's order can leak the gold. The salt and seed are
recorded; the default salt is public, so this guards against leaks by accident, not against a
system written with the dataset in hand to cheat. ``--real-ids`` shows the dataset's ids in the
dataset's order, and the run is labelled "ids visible" (sidecar, summary, report). A session id
listed twice in a haystack is sent once. No ``has_answer`` flag, answer or question type is
ever sent.

What the system must return: every session of the haystack exactly once. An id that is not in
the haystack, an id returned twice, or a ranking shorter than the haystack is one
:class:`SystemReplyError` naming the question and the id (the run stops; its rows so far are
kept and ``--resume`` continues): a ranking metric at k > its length, or a recall_all over
sessions it never ranked, would otherwise be scored on sessions the system did not order.

What a run records (``describe()``, the sidecar's ``retriever`` section, in the fingerprint):
the entry (name and target), the distribution's name and version and the installed versions of
what it requires, the sha256 of each of its installed files and of the factory's module source files (:func:`system_identity`), the
settings and their sha256, and the ids (``real_ids``, ``id_salt``, ``id_seed``). ``verify
--rerun`` rebuilds the system from the recorded settings and, where the installed version or
files differ, says which (:func:`identity_difference`) instead of re-running.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import numbers
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.data.records import Question, Session
from engram_eval.errors import ConfigError, EngramEvalError
from engram_eval.io import sha256_file, sha256_json
from engram_eval.retrieval.base import Ranking, ScoredSession
from engram_eval.retrieval.models import ModelRef
from engram_eval.retrieval.settings import SystemSettings
from engram_eval.retrieval.sources import SYSTEM_SOURCES

#: The entry-point group a distribution registers its systems in.
ENTRY_POINT_GROUP = "engram_eval.retrievers"
PY_PREFIX = "py:"
HTTP = "http"
#: Label of a run whose system saw the real ids (sidecar, summary, report header).
IDS_VISIBLE = "ids visible"
IDS_OPAQUE = "opaque ids"
#: The most source files hashed for one system (a factory inside a huge package is refused:
#: point py: at a small module instead).
MAX_FILES = 5000


class SystemReplyError(EngramEvalError):
    """A system's reply is not a ranking of its haystack (message names question and id)."""


class SystemUnavailableError(ConfigError):
    """The system a run recorded cannot be built here (not installed, not importable):
    ``verify --rerun`` cannot re-execute it; the message names it and how to install it."""


#: The words :class:`SystemUnavailableError` messages carry (tests skip on them).
NOT_INSTALLED = "is not installed here"


# --------------------------------------------------------------------------- resolution
def entry_points() -> dict[str, Any]:
    """The installed entry points of :data:`ENTRY_POINT_GROUP`, by name."""
    from importlib.metadata import entry_points as installed

    return {ep.name: ep for ep in installed(group=ENTRY_POINT_GROUP)}


def resolve(name: str) -> tuple[Any, dict[str, Any]]:
    """``(factory, identity)`` of the system ``name`` (entry point or ``py:MODULE:FACTORY``)."""
    if name.startswith(PY_PREFIX):
        target = name[len(PY_PREFIX):]
        module_name, sep, attr = target.rpartition(":")
        if not sep or not module_name or not attr:
            raise ConfigError(f"--retriever {name}: expected py:MODULE:FACTORY")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ConfigError(f"--retriever {name}: cannot import {module_name}: {e}") from None
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise ConfigError(f"--retriever {name}: {module_name} has no callable {attr!r}")
        return factory, system_identity(factory, entry=name, dist=_owning_distribution(module))
    eps = entry_points()
    if name not in eps:
        from engram_eval.retrieval.base import available

        raise ConfigError(f"unknown retriever {name!r}; available: {', '.join(available())}; "
                          f"entry points ({ENTRY_POINT_GROUP}): "
                          f"{', '.join(sorted(eps)) or 'none installed'}; or py:MODULE:FACTORY, "
                          "or http with --system-url")
    ep = eps[name]
    try:
        factory = ep.load()
    except Exception as e:  # noqa: BLE001 - whatever the plugin raises on import
        raise ConfigError(f"--retriever {name}: entry point {ep.value!r} cannot be loaded: "
                          f"{type(e).__name__}: {e}") from None
    return factory, system_identity(factory, entry=f"{name} = {ep.value}", dist=ep.dist)


def _owning_distribution(module: Any) -> Any:
    """The installed distribution that ships ``module``'s top-level package (None if none or
    several)."""
    from importlib.metadata import distribution, packages_distributions

    top = module.__name__.split(".")[0]
    names = sorted(set(packages_distributions().get(top, [])))
    if len(names) != 1:
        return None
    try:
        return distribution(names[0])
    except Exception:  # noqa: BLE001 - metadata that cannot be read: no distribution
        return None


def _module_files(factory: Any) -> dict[str, str]:
    """sha256 of every file (code and data, bytecode left out) of the top-level package (or
    the one module) that holds ``factory``, keyed by its path below the package's parent
    folder (``pkg/__init__.py``), as an installed distribution's RECORD names it."""
    module = sys.modules.get(getattr(factory, "__module__", "") or "")
    if module is None or not getattr(module, "__file__", None):
        return {}
    top = sys.modules.get(module.__name__.split(".")[0], module)
    top_file = Path(str(getattr(top, "__file__", None) or module.__file__)).resolve()
    if top_file.name == "__init__.py":
        base = top_file.parent.parent
        files = sorted(p for p in top_file.parent.rglob("*") if p.is_file()
                       and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))
    else:
        base, files = top_file.parent, [top_file]
    if len(files) > MAX_FILES:
        raise ConfigError(f"the system's package {top.__name__} holds {len(files)} files (at "
                          f"most {MAX_FILES} are hashed): point py: at a smaller package")
    return {p.relative_to(base).as_posix(): sha256_file(p) for p in files}


def _distribution_files(dist: Any) -> dict[str, str]:
    """sha256 of each file ``dist`` installs that is part of what it is: bytecode, the
    ``.dist-info`` folder (but its ``entry_points.txt``, kept as
    ``dist-info/entry_points.txt``) and an editable install's ``.pth`` and finder files are
    left out, since they change with how and where it was installed, not with its code; a
    listed file that is missing is ``missing``. Keys as its RECORD names the files."""
    out: dict[str, str] = {}
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if not parts or "__pycache__" in parts or parts[-1].endswith((".pyc", ".pyo", ".pth")) \
                or parts[0].startswith("__editable__") or parts[0] == "..":
            continue
        if parts[0].endswith((".dist-info", ".egg-info")):
            if parts[-1] != "entry_points.txt":
                continue
            rel = "dist-info/entry_points.txt"
        else:
            rel = "/".join(parts)
        path = Path(dist.locate_file(f))
        out[rel] = sha256_file(path) if path.is_file() else "missing"
        if len(out) > MAX_FILES:
            raise ConfigError(f"distribution {dist.metadata['Name']} installs over {MAX_FILES} "
                              "files: too many to hash for a system's identity")
    return out


def system_identity(factory: Any, *, entry: str, dist: Any = None) -> dict[str, Any]:
    """What identifies the code of a system: its entry, its distribution's name and version
    (None for a module no distribution ships) and the sha256 of each of its files: the files
    of the factory's top-level package (:func:`_module_files`) and any other file the
    distribution installs (:func:`_distribution_files`), keyed by path as a RECORD names them,
    so an editable and a regular install of the same code record the same."""
    files = {**(_distribution_files(dist) if dist is not None else {}), **_module_files(factory)}
    return {"entry": entry,
            "distribution": dist.metadata["Name"] if dist is not None else None,
            "version": dist.version if dist is not None else None,
            "dependencies": _dependencies(dist) if dist is not None else {},
            "files_sha256": dict(sorted(files.items()))}


def _dependencies(dist: Any) -> dict[str, str | None]:
    """The installed version of each distribution ``dist`` requires (its extras' left out;
    None where one is not installed)."""
    import re
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for req in dist.requires or []:
        if "extra ==" in req.replace('"', "").replace("'", ""):
            continue
        name = re.split(r"[\s;<>=!~\[(]", req.strip(), maxsplit=1)[0]
        if not name:
            continue
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return dict(sorted(out.items()))


def identity_difference(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """How the installed system (``now``, ``describe()["system"]``) differs from the one a run
    recorded: entry, distribution, version, each file differing, absent or new, settings."""
    out = []
    for key in ("entry", "distribution", "version", "dependencies", "url"):
        if recorded.get(key) != now.get(key):
            out.append(f"{key}: the run's {recorded.get(key)!r}, installed {now.get(key)!r}")
    then_files = recorded.get("files_sha256") or {}
    now_files = now.get("files_sha256") or {}
    changed = sorted(k for k in set(then_files) & set(now_files) if then_files[k] != now_files[k])
    gone = sorted(set(then_files) - set(now_files))
    new = sorted(set(now_files) - set(then_files))
    for what, names in (("files differing", changed), ("files the run had, absent now", gone),
                        ("files not in the run", new)):
        if names:
            more = f" and {len(names) - 8} more" if len(names) > 8 else ""
            out.append(f"{what}: {', '.join(names[:8])}{more}")
    if recorded.get("settings_sha256") != now.get("settings_sha256"):
        out.append(f"settings sha256: the run's {str(recorded.get('settings_sha256'))[:16]}…, "
                   f"now {str(now.get('settings_sha256'))[:16]}…")
    if recorded.get("server") != now.get("server"):
        out.append(f"server's description: the run's {recorded.get('server')!r}, now "
                   f"{now.get('server')!r}")
    return out


def create_system(name: str, config: Any) -> SystemRetriever:
    """The retriever of a system from outside the package (see the module docstring)."""
    settings = SystemSettings.of_config(config)
    if name == HTTP:
        from engram_eval.retrieval.http_system import HttpSystem

        system: Any = HttpSystem(settings)
        identity = system.identity()
    else:
        if settings.system_url:
            raise ConfigError(f"--system-url goes with --retriever http, not {name!r}")
        factory, identity = resolve(name)
        try:
            system = factory(dict(settings.system_settings))
        except EngramEvalError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the plugin raises
            raise ConfigError(f"--retriever {name}: its factory failed with the settings "
                              f"given: {type(e).__name__}: {e}") from None
        for method in ("index", "search"):
            if not callable(getattr(system, method, None)):
                raise ConfigError(f"--retriever {name}: the object its factory returns has no "
                                  f"{method}() method (a system has index(haystack) and "
                                  "search(query))")
    return SystemRetriever(name, system, identity, settings)


# --------------------------------------------------------------------------- the adapter
def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class SystemRetriever:
    """The :class:`~engram_eval.retrieval.base.Retriever` around a system (module docstring):
    ids made opaque and order shuffled on the way in, mapped back and checked on the way out."""

    def __init__(self, name: str, system: Any, identity: Mapping[str, Any],
                 settings: SystemSettings) -> None:
        self.name = name
        self.system = system
        self.settings = settings
        self.identity = dict(identity)
        self._sessions: tuple[Session, ...] = ()

    # ids ------------------------------------------------------------------
    def _opaque(self, question_id: str, session_id: str) -> str:
        if self.settings.real_ids:
            return session_id
        return "s" + _digest(self.settings.id_salt, question_id, session_id)[:16]

    def _question_id(self, question_id: str) -> str:
        if self.settings.real_ids:
            return question_id
        return "q" + _digest(self.settings.id_salt, "question", question_id)[:16]

    def haystack(self, question: Question) -> tuple[dict[str, Any], dict[str, str]]:
        """The ``index`` document the system sees for ``question`` and the map back from the
        ids it sees to the dataset's."""
        unique: dict[str, Session] = {}
        for s in self._sessions:
            unique.setdefault(s.session_id, s)
        sessions = list(unique.values())
        if not self.settings.real_ids:
            rng = random.Random(f"{self.settings.id_salt}\0{self.settings.id_seed}\0"
                                f"{question.question_id}")
            rng.shuffle(sessions)
        back: dict[str, str] = {}
        docs = []
        for s in sessions:
            shown = self._opaque(question.question_id, s.session_id)
            if shown in back:  # 64 bits: never seen, but never silently merged either
                raise SystemReplyError(f"question {question.question_id}: two sessions share "
                                       f"the opaque id {shown}; choose another --id-salt")
            back[shown] = s.session_id
            docs.append({"id": shown, "date": s.date,
                         "turns": [{"role": t.role, "content": t.content} for t in s.turns]})
        doc = {"haystack_id": self._question_id(question.question_id),
               "settings": dict(self.settings.system_settings), "sessions": docs}
        return doc, back

    def query(self, question: Question) -> dict[str, Any]:
        """The ``search`` document the system sees for ``question``."""
        return {"haystack_id": self._question_id(question.question_id),
                "question": {"id": self._question_id(question.question_id),
                             "text": question.question, "date": question.question_date}}

    # the retriever protocol ---------------------------------------------------
    def index(self, sessions: Sequence[Session]) -> None:
        # the system is sent the haystack in rank(), when the question (whose id salts the
        # opaque ids and seeds the order) is known
        self._sessions = tuple(sessions)

    def rank(self, question: Question) -> Ranking:
        doc, back = self.haystack(question)
        self._call("index", doc, question.question_id)
        reply = self._call("search", self.query(question), question.question_id)
        ids, scores = parse_ranking(reply, back, question.question_id, self.name)
        n = len(ids)
        if scores is None:
            results = [ScoredSession(back[i], float(n - r), {"system_score": False})
                       for r, i in enumerate(ids)]
        else:
            results = [ScoredSession(back[i], s, {"system_score": True})
                       for i, s in zip(ids, scores, strict=True)]
        return Ranking(question.question_id, tuple(results))

    def _call(self, method: str, doc: dict[str, Any], question_id: str) -> Any:
        """The system's ``method(doc)``; whatever it raises (other than the package's own
        errors, which already say what went wrong) is one :class:`SystemReplyError` naming the
        system, the question and the exception."""
        try:
            return getattr(self.system, method)(doc)
        except EngramEvalError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever the system raises
            raise SystemReplyError(f"system {self.name}: question {question_id}: its "
                                   f"{method}() raised {type(e).__name__}: "
                                   f"{' '.join(str(e).split())[:300]}") from e

    def question_cost(self) -> dict[str, int]:
        """What the last question cost beyond its wall time (HTTP: requests and bytes)."""
        cost = getattr(self.system, "question_cost", None)
        return dict(cost()) if callable(cost) else {}

    def stats(self) -> dict[str, Any]:
        stats = getattr(self.system, "stats", None)
        return {"system": dict(stats())} if callable(stats) else {}

    def describe(self) -> dict[str, Any]:
        settings = dict(self.settings.system_settings)
        return {"retriever": self.name,
                "system": {**self.identity, "settings": settings,
                           "settings_sha256": sha256_json(settings)},
                "ids": {"real_ids": self.settings.real_ids, "id_salt": self.settings.id_salt,
                        "id_seed": self.settings.id_seed,
                        "label": IDS_VISIBLE if self.settings.real_ids else IDS_OPAQUE}}

    def models(self) -> list[ModelRef]:
        return []

    def source_modules(self) -> list[str]:
        return list(SYSTEM_SOURCES)


def parse_ranking(reply: Any, back: Mapping[str, str], question_id: str,
                  name: str) -> tuple[list[str], list[float] | None]:
    """The ids (as the system saw them) and scores (None when the system gave none) of a
    ``search`` reply, checked to rank every session of the haystack exactly once (module
    docstring); anything else is one :class:`SystemReplyError`."""
    where = f"system {name}: question {question_id}"
    if isinstance(reply, Mapping):
        if "ranking" not in reply:
            raise SystemReplyError(f"{where}: the search reply is an object without "
                                   "'ranking'")
        reply = reply["ranking"]
    if not isinstance(reply, (list, tuple)):
        raise SystemReplyError(f"{where}: the search reply is {type(reply).__name__}, not a "
                               "list of session ids or of {id, score}")
    ids: list[str] = []
    scores: list[float | None] = []
    for i, item in enumerate(reply):
        if isinstance(item, str):
            sid, score = item, None
        elif isinstance(item, Mapping) and isinstance(item.get("id"), str):
            sid, score = item["id"], item.get("score")
            if score is not None and (isinstance(score, bool) or not isinstance(
                    score, numbers.Real) or not math.isfinite(score)):
                raise SystemReplyError(f"{where}: ranking[{i}] score {str(score)[:40]!r} is "
                                       "not a finite number")
        else:
            raise SystemReplyError(f"{where}: ranking[{i}] is {str(item)[:60]!r}, not a "
                                   "session id or an object with a string 'id'")
        if sid not in back:
            raise SystemReplyError(f"{where}: ranking[{i}] names {sid[:80]!r}, which is not "
                                   "a session of the haystack it was given")
        ids.append(sid)
        scores.append(None if score is None else float(score))
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise SystemReplyError(f"{where}: the ranking names {dup!r} twice; each session must "
                               "be ranked exactly once")
    if len(ids) < len(back):
        missing = [i for i in back if i not in set(ids)]
        raise SystemReplyError(f"{where}: the ranking holds {len(ids)} of the haystack's "
                               f"{len(back)} sessions (missing e.g. {missing[:3]}); a system "
                               "must rank every session it was given")
    given = [s is not None for s in scores]
    if any(given) and not all(given):
        raise SystemReplyError(f"{where}: scores are given for some sessions, not all "
                               "(give a score for every session or for none)")
    if not any(given):
        return ids, None
    out = [float(s) for s in scores if s is not None]
    for r in range(1, len(out)):
        if out[r] > out[r - 1]:
            raise SystemReplyError(f"{where}: ranking[{r}] scores {out[r]!r} above "
                                   f"ranking[{r - 1}]'s {out[r - 1]!r}; scores must not "
                                   "increase down the ranking")
    return ids, out
