"""What is computed once per collection before any episode: the candidate expansion terms of every query, mined
from its feedback documents on a thread pool and cached (``candidates``), and the embeddings of queries and
candidate terms (``embeddings``: LSA, sentence-transformers, static model2vec, the seed's word2vec), cached by content,
each query's own features for choosing its start (``query_features``), and the static query encoder of semantic
feedback, adapted to the collection at first use (``query_encoder``)."""

from adaptive_ir.mining.candidates import CandidateMiner, CandidateSet, mine_cached
from adaptive_ir.mining.embeddings import EmbeddingCache, encode_corpus, make_embedder, make_reranker
from adaptive_ir.mining.query_encoder import adapted_query_encoder
from adaptive_ir.mining.query_features import QUERY_FEATURES, query_features

__all__ = ["QUERY_FEATURES", "CandidateMiner", "CandidateSet", "EmbeddingCache", "adapted_query_encoder",
           "encode_corpus", "make_embedder", "make_reranker", "mine_cached", "query_features"]
