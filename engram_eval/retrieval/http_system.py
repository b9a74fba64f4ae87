"""A memory system behind an HTTP server (``--retriever http --system-url URL``).

The protocol (JSON over HTTP POST, UTF-8; schema ``engram_eval/schemas/system.schema.json``):

* ``POST URL/index`` with the haystack document of :mod:`engram_eval.retrieval.systems`
  (``{"haystack_id", "settings", "sessions": [{"id", "date", "turns": [{"role",
  "content"}]}]}``); any 2xx reply (its body is ignored);
* ``POST URL/search`` with ``{"haystack_id", "question": {"id", "text", "date"}}``; the reply
  ``{"ranking": [{"id": ..., "score": ...}, ...]}`` (or ``[id, ...]``), best first, every
  session exactly once, scores optional;
* ``GET URL/describe`` (optional): ``{"name", "version", ...}``, recorded in the sidecar as the
  server's own description (a 404 records none).

Each request has a total deadline (``--system-deadline`` seconds, however slowly the server
sends) and reads at most ``--system-max-bytes`` of reply, both enforced while it runs
(:mod:`engram_eval.net.bounded_http`); timeouts, connection failures, 429 and 5xx are retried
with exponential backoff and jitter (:class:`engram_eval.net.retry.RetryPolicy`,
``--system-attempts``, ``--system-backoff``), other statuses, an oversized or compressed reply
and a reply that is not JSON stop the run with one error. No credential is sent or written:
a URL holding user info or a query is refused without being printed
(:func:`engram_eval.net.secrets.base_url_problem`), and the sidecar records scheme, host,
port and path only. Per question the adapter counts requests and bytes sent and received
(the rows' ``timing``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from engram_eval.errors import ConfigError, EngramEvalError
from engram_eval.retrieval.settings import SystemSettings


class SystemHttpError(EngramEvalError):
    """The system's server failed in a way that stops the run."""


def _httpx() -> Any:
    try:
        import httpx2
    except ImportError:
        raise ConfigError("--retriever http needs httpx2, which is not installed: "
                          "pip install 'engram-eval[qa]'") from None
    return httpx2


class HttpSystem:
    """``index`` and ``search`` over HTTP (module docstring), with per-question cost counters."""

    def __init__(self, settings: SystemSettings,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        from engram_eval.net.bounded_http import ReplyRefused, bounded_client
        from engram_eval.net.retry import RetryPolicy
        from engram_eval.net.secrets import base_url_problem, public_url

        _httpx()
        url = settings.system_url
        if not url:
            raise ConfigError("--retriever http needs --system-url URL (the system server's "
                              "base URL)")
        why = base_url_problem(url)
        if why is not None:
            raise ConfigError(f"--system-url {why.split(';')[0]} (the URL is not printed: it "
                              "may hold a credential)")
        self.url = public_url(url)
        self.settings = settings
        self.retry = RetryPolicy(attempts=settings.system_attempts,
                                 base_delay=settings.system_backoff,
                                 max_delay=max(settings.system_backoff, 30.0))
        self._refused = ReplyRefused
        self._client = bounded_client(settings.system_deadline, settings.system_max_bytes)
        self._sleep = sleep
        self._cost = {"requests": 0, "bytes_sent": 0, "bytes_received": 0}
        self._totals = {"requests": 0, "retries": 0, "bytes_sent": 0, "bytes_received": 0}

    # ------------------------------------------------------------------
    def _send(self, method: str, path: str, body: Any, *, what: str,
              missing_ok: bool = False) -> Any:
        httpx2 = _httpx()
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        last = ""
        for attempt in range(1, self.retry.attempts + 1):
            retry_after: float | None = None
            self._count("requests", 1)
            self._count("bytes_sent", len(data or b""))
            try:
                resp = self._client.request(
                    method, f"{self.url}/{path}", content=data,
                    headers={"Content-Type": "application/json"} if data is not None else {})
                self._count("bytes_received", len(resp.content))
                status = resp.status_code
                if missing_ok and status == 404:
                    return None
                if 200 <= status < 300:
                    if path == "index":
                        return None
                    try:
                        return json.loads(resp.content)
                    except (ValueError, RecursionError) as e:
                        raise SystemHttpError(f"{self.url}/{path} ({what}): the reply is not "
                                              f"JSON ({str(e)[:120]}); stopping") from None
                if status == 429 or status >= 500:
                    last = f"HTTP {status}"
                    try:
                        retry_after = float(resp.headers.get("retry-after", ""))
                    except ValueError:
                        retry_after = None
                else:
                    raise SystemHttpError(f"{self.url}/{path} ({what}) answered HTTP {status}: "
                                          f"{resp.text[:200]!r}; stopping")
            except self._refused as e:
                raise SystemHttpError(f"{self.url}/{path} ({what}): {e}; stopping") from None
            except httpx2.TimeoutException:
                last = (f"no complete reply within {self.settings.system_deadline:g} s "
                        "(--system-deadline, for the whole request)")
            except httpx2.TransportError as e:
                last = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
            self._totals["retries"] += attempt < self.retry.attempts
            if attempt < self.retry.attempts:
                self._sleep(self.retry.delay(attempt, retry_after))
        raise SystemHttpError(f"{self.url}/{path} ({what}): gave up after "
                              f"{self.retry.attempts} attempt(s); last error: {last}")

    def _count(self, key: str, n: int) -> None:
        self._cost[key] += n
        self._totals[key] += n

    # the system protocol ------------------------------------------------------
    def index(self, haystack: dict[str, Any]) -> None:
        self._cost = {"requests": 0, "bytes_sent": 0, "bytes_received": 0}
        self._send("POST", "index", haystack, what=f"haystack {haystack['haystack_id']}")

    def search(self, query: dict[str, Any]) -> Any:
        return self._send("POST", "search", query, what=f"question {query['question']['id']}")

    def question_cost(self) -> dict[str, int]:
        return dict(self._cost)

    def stats(self) -> dict[str, int]:
        return dict(self._totals)

    def identity(self) -> dict[str, Any]:
        """The system as a sidecar records it: the URL (no credentials) and what the server
        says it is (``GET /describe``; None without one)."""
        described = self._send("GET", "describe", None, what="describe", missing_ok=True)
        self._totals = {k: 0 for k in self._totals}
        if described is not None and not isinstance(described, dict):
            raise SystemHttpError(f"{self.url}/describe: the reply is not a JSON object")
        return {"entry": "http", "url": self.url, "distribution": None, "version": None,
                "files_sha256": {}, "server": described}
