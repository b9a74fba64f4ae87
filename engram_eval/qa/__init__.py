"""From retrieval to answers: reader-ready context (:mod:`.context`), answering through any
OpenAI-compatible chat endpoint (:mod:`.answer`), and LongMemEval's judge protocol
(:mod:`.judge`, :mod:`.report`). Prompts live in :mod:`.prompts`, the chat client in
:mod:`.client` (its HTTP deadline and size cap in :mod:`engram_eval.net.bounded_http`; what it never lets
out, the key and URL credentials, in :mod:`engram_eval.net.secrets`), and the run discipline the three
share (refuse overwrite, verified resume, torn-line repair) in :mod:`.files`."""
