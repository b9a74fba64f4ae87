"""Retrieval: candidate generation, reranking, passages and temporal helpers."""
