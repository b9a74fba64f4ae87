"""engram-eval: provenance-locked retrieval benchmarks for long-term conversational memory."""

__version__ = "0.1.0"
