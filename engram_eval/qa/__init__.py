"""From retrieval to answers: reader-ready context (:mod:`.context`), answering through any
OpenAI-compatible chat endpoint (:mod:`.answer`), and LongMemEval's judge protocol
(:mod:`.judge`, :mod:`.report`). Prompts live in :mod:`.prompts`, the HTTP client in
:mod:`.client`, and the run discipline the three share (refuse overwrite, verified resume,
torn-line repair) in :mod:`.files`."""
