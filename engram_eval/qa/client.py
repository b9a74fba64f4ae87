"""One chat completion at a time against any OpenAI-compatible endpoint, through the
official ``openai`` client (``base_url``), with this package's retry policy.

* The API key is read from an environment variable (``OPENAI_API_KEY`` unless told
  otherwise) and only handed to the client: it is never written to a file, a log, a sidecar
  or an error message (:func:`engram_eval.net.secrets.redact` scrubs every text that leaves
  this module -- replies, error bodies -- since a server may echo what it was sent, also
  split by invisible characters or cut short). A server that needs no key still needs the
  variable set (any value, e.g. ``EMPTY``), so a forgotten key is never silently sent as
  nothing. A ``--base-url`` holding a credential (user info, a query) is refused
  (:func:`engram_eval.net.secrets.check_base_url`).
* Each request has a total deadline (``timeout`` seconds, however slowly the server sends)
  and a reply size cap (:data:`MAX_REPLY_BYTES`, counted while reading), both enforced by
  the HTTP client of :mod:`engram_eval.net.bounded_http`.
* Rate limits (429), server errors (5xx), connection failures and timeouts, and malformed
  replies (no choice, no text, a body that is not a completion) are retried with exponential
  backoff and jitter (honouring ``Retry-After``) up to ``RetryPolicy.attempts``; then the
  run stops with the last error.
* A refused key (401/403) stops at once with a clear :class:`AuthError`; other client errors
  (400, 404: a wrong model name or URL) stop at once too, and so does a reply over the size
  cap or compressed (it would be again).

``openai`` is imported lazily (an optional extra: ``pip install 'engram-eval[qa]'``).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engram_eval.errors import ConfigError, EngramEvalError
from engram_eval.net.retry import RetryPolicy
from engram_eval.net.secrets import check_base_url, key_env_problem, public_url, redact

_log = logging.getLogger(__name__)

DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class EndpointError(EngramEvalError):
    """The endpoint failed in a way that stops the run (its message never holds the key)."""


class AuthError(EndpointError):
    """The endpoint refused the API key (HTTP 401 or 403)."""


class MalformedReply(EngramEvalError):
    """A 200 reply that is not a usable chat completion."""


_T = TypeVar("_T")
_R = TypeVar("_R")


def run_bounded(work: Callable[[_T], _R], items: Iterable[_T], concurrency: int,
                on_result: Callable[[_R], None]) -> None:
    """Call ``work`` on every item with at most ``concurrency`` calls in flight, handing each
    result to ``on_result`` in the calling thread as it completes (then starting the next).
    The first error (from ``work`` or ``on_result``) cancels the calls not yet started and is
    raised; calls already running finish before it propagates."""
    with ThreadPoolExecutor(concurrency) as pool:
        queue = iter(items)
        pending: set[Future[_R]] = set()

        def submit() -> None:
            for item in queue:
                pending.add(pool.submit(work, item))
                return

        for _ in range(concurrency):
            submit()
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    pending.discard(f)
                    on_result(f.result())
                    submit()
        except BaseException:
            for f in pending:
                f.cancel()
            raise


def load_openai() -> Any:
    try:
        import openai
    except ImportError:
        raise ConfigError("the answer and judge steps need the `openai` package: pip install "
                          "'engram-eval[qa]' (or pip install 'openai>=1.40')") from None
    return openai


def api_key_from_env(var: str = DEFAULT_KEY_ENV) -> str:
    """The key in ``$var``; a ConfigError naming the variable (never a value) when unset,
    or when ``var`` is no variable name (the key itself, given by mistake: not quoted)."""
    why = key_env_problem(var)
    if why is not None:
        raise ConfigError(f"--api-key-env {why}")
    key = os.environ.get(var)
    if not key:
        raise ConfigError(f"no API key: set the environment variable {var} (the key is read "
                          "from the environment only, never from a file or a flag; for a "
                          f"local server that needs none, set {var}=EMPTY)")
    return key


#: The longest reply text kept (characters); a longer reply is malformed (retried, then an
#: error), so a runaway server cannot fill memory or the output file.
MAX_REPLY_CHARS = 200_000
#: The most bytes of one HTTP reply read (counted while reading, :mod:`engram_eval.net.bounded_http`): a
#: longer reply stops the run at once, so a runaway server cannot fill memory. A reply of
#: ``MAX_REPLY_CHARS`` characters, each escaped in JSON, fits.
MAX_REPLY_BYTES = 8 * 2**20


@dataclass(frozen=True)
class ChatSettings:
    """What defines a request besides its messages (all recorded in the sidecar)."""

    model: str
    temperature: float = 0.0
    max_tokens: int | None = None
    seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "seed": self.seed}


@dataclass(frozen=True)
class ChatReply:
    text: str
    finish_reason: str | None
    attempts: int
    usage: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Counters:
    """Totals over a run (thread-safe): requests, retries by cause, tokens the server
    reported."""

    requests: int = 0
    retries: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, retry: str | None = None, usage: Mapping[str, int] | None = None) -> None:
        with self._lock:
            if retry is not None:
                self.retries[retry] = self.retries.get(retry, 0) + 1
                return
            self.requests += 1
            if usage:
                self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                self.completion_tokens += int(usage.get("completion_tokens") or 0)

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "retries": dict(sorted(self.retries.items())),
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}


class ChatClient:
    """``complete(messages) -> ChatReply``; safe to call from several threads."""

    def __init__(self, base_url: str, settings: ChatSettings, *, key_env: str = DEFAULT_KEY_ENV,
                 retry: RetryPolicy | None = None, timeout: float = 300.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ConfigError(f"--timeout must be a positive number of seconds (got {timeout})")
        check_base_url(base_url)  # before anything else: no credential in the URL
        openai = load_openai()
        from engram_eval.net.bounded_http import ReplyRefused, bounded_client

        self._openai = openai
        self._refused = ReplyRefused
        self._key = api_key_from_env(key_env)
        self.key_env = key_env
        check_base_url(base_url, self._key)
        self.base_url = public_url(base_url)
        self.settings = settings
        self.retry = retry or RetryPolicy()
        self.timeout = float(timeout)
        self.counters = Counters()
        self._sleep = sleep
        self._client = openai.OpenAI(api_key=self._key, base_url=self.base_url, max_retries=0,
                                     timeout=timeout,
                                     http_client=bounded_client(self.timeout, MAX_REPLY_BYTES))

    def describe(self) -> dict[str, Any]:
        """The endpoint as a sidecar records it: URL without credentials, the name of the key
        variable (never its value)."""
        return {"base_url": self.base_url, "api_key_env": self.key_env,
                "client": "openai", "retry": {"attempts": self.retry.attempts,
                                              "base_delay": self.retry.base_delay,
                                              "max_delay": self.retry.max_delay}}

    def _request(self, messages: Sequence[Mapping[str, str]]) -> ChatReply:
        s = self.settings
        kwargs: dict[str, Any] = {"model": s.model, "messages": list(messages),
                                  "temperature": s.temperature}
        if s.max_tokens is not None:
            kwargs["max_tokens"] = s.max_tokens
        if s.seed is not None:
            kwargs["seed"] = s.seed
        resp = self._client.chat.completions.create(**kwargs)
        try:
            choice = resp.choices[0]
            text = choice.message.content
        except (AttributeError, IndexError, TypeError, KeyError):
            raise MalformedReply("the reply holds no choice with a message") from None
        if not isinstance(text, str):
            raise MalformedReply("the reply's message has no text content")
        if len(text) > MAX_REPLY_CHARS:
            raise MalformedReply(f"the reply's text has {len(text)} characters (at most "
                                 f"{MAX_REPLY_CHARS})")
        text = redact(text, self._key)  # a server that echoes the key never gets it written
        usage = getattr(resp, "usage", None)
        used = {}
        if usage is not None:
            used = {k: int(getattr(usage, k, 0) or 0) for k in ("prompt_tokens",
                                                                  "completion_tokens")}
        return ChatReply(text, getattr(choice, "finish_reason", None), 0, used)

    def complete(self, messages: Sequence[Mapping[str, str]], *, what: str = "") -> ChatReply:
        o = self._openai
        last = ""
        for attempt in range(1, self.retry.attempts + 1):
            retry_after: float | None = None
            try:
                reply = self._request(messages)
                self.counters.add(usage=reply.usage)
                return ChatReply(reply.text, reply.finish_reason, attempt, reply.usage)
            except (o.AuthenticationError, o.PermissionDeniedError) as e:
                raise AuthError(
                    f"{self.base_url} refused the API key from ${self.key_env} (HTTP "
                    f"{e.status_code}): {self._message(e)}; stopping (rows written so far are "
                    "kept; fix the key, then continue with --resume)") from None
            except (o.RateLimitError, o.InternalServerError) as e:
                cause = "rate_limit" if e.status_code == 429 else "server_error"
                last = f"HTTP {e.status_code}: {self._message(e)}"
                retry_after = _retry_after(e)
            except o.APIStatusError as e:
                if e.status_code >= 500:
                    cause, last = "server_error", f"HTTP {e.status_code}: {self._message(e)}"
                else:
                    raise EndpointError(
                        f"{self.base_url} answered HTTP {e.status_code} for model "
                        f"{self.settings.model!r}{' (' + what + ')' if what else ''}: "
                        f"{self._message(e)}; stopping") from None
            except self._refused as e:  # too large or compressed: it would be again
                raise EndpointError(f"{self.base_url}{' (' + what + ')' if what else ''}: "
                                    f"{e}; stopping") from None
            except o.APITimeoutError:
                cause, last = "connection", (f"no complete reply within {self.timeout:g} s "
                                             "(--timeout, for the whole request)")
            except o.APIConnectionError as e:
                cause, last = "connection", f"{type(e).__name__}: {self._message(e)}"
            except (MalformedReply, o.APIResponseValidationError, ValueError, TypeError) as e:
                cause, last = "malformed_reply", f"malformed reply: {self._message(e)}"
            self.counters.add(retry=cause)
            if attempt < self.retry.attempts:
                wait = self.retry.delay(attempt, retry_after)
                _log.info("%s: %s; retry %d/%d in %.2fs", what or "request", last, attempt,
                          self.retry.attempts - 1, wait)
                self._sleep(wait)
        raise EndpointError(f"{self.base_url}: gave up after {self.retry.attempts} attempt(s)"
                            f"{' (' + what + ')' if what else ''}; last error {last}")

    def _message(self, e: BaseException) -> str:
        msg = getattr(e, "message", None) or str(e) or type(e).__name__
        msg = redact(str(msg), self._key)  # first: a cut or re-spaced key would not match
        return " ".join(msg.split())[:300]


def _retry_after(e: Any) -> float | None:
    try:
        value = e.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
