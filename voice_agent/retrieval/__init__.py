"""Retrieval inside a live call (DESIGN section 3): knowledge chunks, hybrid index, speculative cache.

Pure Python: nothing here imports pipecat; ``processors/speculative_retrieval.py`` is the pipeline adapter.
"""

from voice_agent.retrieval.index import (
    E5Embedder,
    Embedder,
    HybridIndex,
    RetrievalConfig,
    RetrievalResult,
    ScoredChunk,
    default_cache_dir,
)
from voice_agent.retrieval.knowledge import KNOWLEDGE_DIR, Chunk, chunk_markdown, content_hash, load_chunks
from voice_agent.retrieval.speculative import (
    SpeculativeConfig,
    SpeculativeRetriever,
    TurnRetrieval,
    jaccard,
    normalise,
)

__all__ = [
    "KNOWLEDGE_DIR",
    "Chunk",
    "E5Embedder",
    "Embedder",
    "HybridIndex",
    "RetrievalConfig",
    "RetrievalResult",
    "ScoredChunk",
    "SpeculativeConfig",
    "SpeculativeRetriever",
    "TurnRetrieval",
    "chunk_markdown",
    "content_hash",
    "default_cache_dir",
    "jaccard",
    "load_chunks",
    "normalise",
]
