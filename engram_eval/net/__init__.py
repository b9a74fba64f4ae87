"""What every HTTP client of the package shares: a request deadline and reply cap
(:mod:`.bounded_http`), the retry policy (:mod:`.retry`) and what never leaks a credential
(:mod:`.secrets`). Used by the answer and judge steps (:mod:`engram_eval.qa`) and by the HTTP
system adapter (:mod:`engram_eval.retrieval.http_system`)."""
