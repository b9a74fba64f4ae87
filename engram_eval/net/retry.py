"""The retry policy of the package's HTTP clients: exponential backoff with jitter, honouring
a server's ``Retry-After``, up to ``attempts`` tries (the first included)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6           # tries per request, the first included
    base_delay: float = 1.0     # seconds before the first retry; doubled each time
    max_delay: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(self.max_delay, max(0.0, retry_after))
        d = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return d * (0.5 + random.random() / 2)
