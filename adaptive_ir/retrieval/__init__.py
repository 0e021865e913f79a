"""Index and search: the analyzer (``analyzer``; Lucene's English analysis in ``lucene``), the BM25 index built
from a streamed corpus with bm25s' or Lucene's numbers (``index``), the compiled CPU kernels (``kernels``), the
batched top-k search over a collection (``retriever``), feedback documents and the relevance model
(``feedback``) and RM3 (``rm3``)."""

from adaptive_ir.retrieval.analyzer import Analyzer, CorpusTerms
from adaptive_ir.retrieval.feedback import SemanticFeedback, feedback_documents, relevance_model
from adaptive_ir.retrieval.index import BM25Index
from adaptive_ir.retrieval.retriever import Retriever
from adaptive_ir.retrieval.rm3 import RM3_FB_DOCS, rm3_expansion
from adaptive_ir.retrieval.vocabulary import Vocabulary

__all__ = ["RM3_FB_DOCS", "Analyzer", "BM25Index", "CorpusTerms", "Retriever", "SemanticFeedback", "Vocabulary",
           "feedback_documents", "relevance_model", "rm3_expansion"]
