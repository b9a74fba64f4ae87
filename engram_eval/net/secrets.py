"""What the answer and judge steps let out about their credentials: nothing.

The API key is read from the environment only and handed to the HTTP client; a server may
echo it back (in a reply, an error body), whole or changed in ways a reader would not see,
so every text that leaves :mod:`engram_eval.qa.client` -- a hypothesis, a judgement, a log
line, an error -- passes :func:`redact` first:

* the key is matched on the text's *normalised* form (:func:`_normalised`: each character's
  NFKC form, with whitespace and Unicode format characters -- zero-width space and joiners,
  word joiner, byte order mark, soft hyphen, every category ``Cf`` character -- dropped), so
  ``sk-\\u200babc``, ``sk-\\u00adabc``, ``ｓｋ－abc`` and a key wrapped over two lines are the
  key; the matched span of the original text is what is replaced;
* a reply cut by its token limit (``finish_reason: "length"``) may end inside the key: any
  prefix of the key of at least :data:`MIN_KEY_PREFIX` characters is redacted too.

A credential inside ``--base-url`` (user info ``name:password@``, a query such as
``?token=...`` or ``?api_key=...``) would be sent (user info as HTTP Basic auth), logged by
the HTTP client and recorded: :func:`check_base_url` refuses such a URL, and any URL it
cannot take apart, with one error that never quotes it. :func:`public_argv` and
:func:`public_text` strip credentials from a command line and from log lines all the same.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

from engram_eval.errors import ConfigError

#: The shortest prefix of the key redacted on its own (a key shorter than this is redacted
#: whole only). Eight characters is the public head of today's keys (``sk-proj-``): a
#: longer piece of the key starts to tell its secret part.
MIN_KEY_PREFIX = 8
REDACTED = "[redacted]"


def _dropped(ch: str) -> bool:
    """Characters a server may put inside an echoed key without changing how it reads:
    whitespace and Unicode format characters (category ``Cf``)."""
    return ch.isspace() or unicodedata.category(ch) == "Cf"


def _normalised(text: str) -> tuple[str, list[int]]:
    """``text`` with each character replaced by its NFKC form and :func:`_dropped`
    characters left out, and for each character of the result the index in ``text`` of the
    character it came from."""
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        if _dropped(ch):
            continue
        form = unicodedata.normalize("NFKC", ch) if not ch.isascii() else ch
        for c in form:
            if not _dropped(c):
                out.append(c)
                origin.append(i)
    return "".join(out), origin


def _spans(norm: str, key: str) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans of ``norm`` holding ``key`` or a prefix of it of at least
    ``min(len(key), MIN_KEY_PREFIX)`` characters, longest first at each place, left to
    right, not overlapping."""
    head = key[:min(len(key), MIN_KEY_PREFIX)]
    spans = []
    at = norm.find(head)
    while at >= 0:
        end = at + len(head)
        while end - at < len(key) and end < len(norm) and norm[end] == key[end - at]:
            end += 1
        spans.append((at, end))
        at = norm.find(head, end)
    return spans


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``[redacted]``: also where
    whitespace or invisible format characters were put inside it, where it was written in
    compatibility forms (full-width letters), and where only a prefix of it of at least
    :data:`MIN_KEY_PREFIX` characters is there (a reply cut inside the key). Redact before
    truncating or re-spacing a message: a cut key would no longer be whole."""
    if not secret:
        return text
    key, _ = _normalised(secret)
    if not key:
        return text
    if text.isascii() and key[:MIN_KEY_PREFIX] not in "".join(text.split()):
        return text  # the common case, quickly: ASCII normalises to itself less whitespace
    norm, origin = _normalised(text)
    out = text
    for start, end in reversed(_spans(norm, key)):
        out = out[:origin[start]] + REDACTED + out[origin[end - 1] + 1:]
    return out


def public_argv(argv: Sequence[str]) -> list[str]:
    """A command line as a sidecar may record it: every URL argument (``--base-url URL`` or
    ``--base-url=URL`` or any ``scheme://`` word) without user info, query or fragment."""
    out = []
    for arg in argv:
        head, eq, tail = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if "://" in tail:
            try:
                tail = _without_credentials(tail)
            except ValueError:  # not a URL urlsplit can take apart: not recorded
                tail = tail.split("://", 1)[0] + "://[redacted]"
        out.append(head + eq + tail)
    return out


def _without_credentials(url: str) -> str:
    """``url`` with scheme, host, port and path only (no user info, query or fragment)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address keeps its brackets
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


#: A URL inside free text (a log line): a scheme, ``://`` and what follows up to a space or
#: a quote.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def public_text(text: str, secret: str | None = None) -> str:
    """``text`` with every URL in it stripped of user info, query and fragment and
    ``secret`` redacted (:func:`redact`): what a log line may carry. A library's own log
    lines are not this package's messages -- the HTTP client logs every request's full URL
    at INFO -- so the command line passes every record through :class:`RedactingFilter`."""
    def clean(m: re.Match[str]) -> str:
        try:
            return _without_credentials(m.group())
        except ValueError:  # not a URL urlsplit can take apart (a bad port, ...)
            return m.group().split("://", 1)[0] + "://[redacted]"

    return _URL_IN_TEXT.sub(clean, redact(text, secret))


class RedactingFilter(logging.Filter):
    """A handler filter that rewrites every record with :func:`public_text` (URLs without
    credentials, the API key redacted) before it is formatted; installed by the command line
    (:mod:`engram_eval.cli.main`), the one place logging is configured."""

    def __init__(self, secret: str | None = None) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = public_text(message, self.secret)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def key_env_problem(name: str) -> str | None:
    """Why ``name`` cannot be ``--api-key-env`` (None when it can), without quoting it: the
    name of an environment variable is letters, digits and ``_``; anything else is most
    likely the key itself, typed where its variable's name goes."""
    if isinstance(name, str) and _ENV_NAME.fullmatch(name):
        return None
    return ("takes the NAME of the environment variable that holds the key (letters, digits "
            "and _, e.g. OPENAI_API_KEY), not the key; the value given is not printed")


_EXAMPLE = "such as http://127.0.0.1:8000/v1"


def base_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be ``--base-url`` (None when it can), in words that never quote
    it: it may hold a credential. Refused: no ``http://`` or ``https://`` scheme, no host,
    an unbalanced ``[``/``]``, a port that is not 1-65535, user info (``name:password@``:
    the HTTP client would send it as Basic auth), and any query or fragment (``?token=``,
    ``?api_key=``, ...: a base URL needs none, and a credential there would be logged and
    sent to every path)."""
    if not isinstance(url, str) or not url.strip():
        return f"is empty; give the API root, {_EXAMPLE}"
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return f"must start with http:// or https:// (the API root, {_EXAMPLE})"
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in netloc:
        return ("holds user info ('name:password@' before the host), which would be sent as "
                "HTTP Basic auth and logged; give the key through the environment variable "
                "named by --api-key-env and a URL without it")
    if "?" in url or "#" in url:
        return ("holds a query or fragment ('?...' or '#...'), where a credential (token=, "
                "key=, api_key=) would be sent and logged; give the key through the "
                "environment variable named by --api-key-env and a URL without it")
    if netloc.count("[") != netloc.count("]") or netloc.count("[") > 1:
        return "has an unbalanced '[' or ']' in its host (an IPv6 address is written [::1])"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "has an invalid host or port (a port is a number from 1 to 65535)"
    if port == 0:
        return "has an invalid port (a port is a number from 1 to 65535)"
    if not parts.hostname:
        return f"has no host; give the API root, {_EXAMPLE}"
    return None


def check_base_url(url: str, secret: str | None = None) -> str:
    """``url`` (a ``--base-url``) without a trailing ``/`` when it can be used; else one
    :class:`ConfigError` saying why (:func:`base_url_problem`) without quoting it. A URL that
    holds the key itself (``secret``) is refused too."""
    why = base_url_problem(url)
    if why is None and secret and redact(url, secret) != url:
        why = ("holds the API key; give it through the environment variable named by "
               "--api-key-env only")
    if why is not None:
        raise ConfigError(f"--base-url {why} (the URL is not printed: it may hold a "
                          "credential)")
    return url.rstrip("/")


def public_url(url: str) -> str:
    """``url`` (a checked ``--base-url``, :func:`check_base_url`) as a sidecar records it:
    scheme, host, port and path."""
    return _without_credentials(check_base_url(url)).rstrip("/")
