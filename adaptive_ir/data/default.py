"""The embedded default collection: generated deterministically, so the product runs with no files and no network.

Pseudo-words are consonant-vowel syllables closed by a consonant ("bakotun"). The letters are chosen so that no
word is an English stopword and a Porter/Snowball stemmer leaves every word unchanged (no -s/-ed/-ing/-al/-er/
-ic/-e endings are possible), so the collection behaves the same under any analyzer setting.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import numpy as np

from adaptive_ir.data.collection import Collection
from adaptive_ir.data.corpus import MemoryCorpus

_ONSETS = "bdfgklmnprtvz"
_VOWELS = "aeiou"
_FINALS = "kmnptxz"


@dataclass(frozen=True)
class _DefaultSpec:
    """Shape of the default collection (the defaults are what `make_default()` generates)."""

    num_topics: int = 32
    subtopics_per_topic: int = 4
    num_docs: int = 2000
    own_words: int = 18  # words specific to a subtopic
    sibling_words: int = 5  # words borrowed from a sibling subtopic (same topic): ambiguity
    decoy_words: int = 3  # words borrowed from a subtopic of another topic: ambiguity
    topic_words: int = 10  # shared by the subtopics of a topic
    background_words: int = 400  # shared by every document, Zipf-distributed
    doc_len: tuple[int, int] = (60, 120)
    active_words: tuple[int, int] = (3, 7)  # subtopic words one document uses (a random subset: mismatch)
    subtopic_share: tuple[float, float] = (0.25, 0.4)  # of a document's tokens
    digression: float = 0.8  # at most this share of those tokens come from a sibling subtopic...
    digression_words: int = 3  # ...drawn from this many of the sibling's words
    topic_share: tuple[float, float] = (0.08, 0.15)  # of a document's tokens; the rest is background
    query_words: tuple[int, int] = (1, 3)  # subtopic words in a query, plus one common (background) word...
    query_common_words: int = 200  # ...among this many most frequent, so that every query matches far more than
    # 40 documents: the R@40 cut-off binds and a misleading expansion term can push relevant documents out
    query_topic_word: float = 0.3  # probability that a query also has a topic word
    split_sizes: tuple[tuple[str, int], ...] = (("train", 250), ("dev", 70), ("test", 80))


def make_default(seed: int = 13, **spec) -> Collection:
    """The embedded default collection, generated deterministically from `seed` (no files, no network).

    32 topics x 4 subtopics; each subtopic has its own pseudo-word vocabulary. A document belongs to one subtopic
    and uses only a random subset of its words, mixed with words of a sibling subtopic, topic words and Zipfian
    background words, so a short query misses many relevant documents, and the co-occurring subtopic words
    found in the top documents are the expansion terms that help (while the sibling's words mislead). A query is
    1-3 words of its subtopic, one common word and sometimes a topic word (2-5 words); its relevant documents are
    the subtopic's documents (8-21 each).
    Keyword arguments override `_DefaultSpec` fields.
    """
    return make_default_with_oracle(seed, **spec)[0]


def make_default_with_oracle(seed: int = 13, **spec) -> tuple[Collection, dict[str, list[str]]]:
    """`make_default`, plus for every query the words specific to its subtopic: the ideal expansion terms,
    for measuring how much reformulation could gain."""
    s = _DefaultSpec(**spec)
    rng = np.random.default_rng(seed)
    words = _PseudoWords(random.Random(seed))
    n_sub = s.num_topics * s.subtopics_per_topic
    # Word lists become numpy arrays once, because rng.choice on a Python list converts it on every call.
    background = np.array(words.take(s.background_words))
    topic_vocab = [np.array(words.take(s.topic_words)) for _ in range(s.num_topics)]
    own = [words.take(s.own_words) for _ in range(n_sub)]
    vocab = [np.array(_subtopic_vocab(k, own, s, rng)) for k in range(n_sub)]

    # Subtopic sizes vary +-40% around the mean.
    weights = rng.uniform(0.6, 1.4, n_sub)
    sizes = np.floor(weights / weights.sum() * s.num_docs).astype(int)
    sizes[: s.num_docs - sizes.sum()] += 1
    doc_sub = rng.permutation(np.repeat(np.arange(n_sub), sizes))  # corpus order says nothing about subtopics
    titles, texts = [], []
    for k in doc_sub:
        sibling, topic = _sibling(int(k), s.subtopics_per_topic, rng), topic_vocab[k // s.subtopics_per_topic]
        title, text = _default_doc(vocab[k], vocab[sibling], topic, background, s, rng)
        titles.append(title)
        texts.append(text)
    doc_ids = [f"D{i:05d}" for i in range(len(doc_sub))]
    members = [[doc_ids[i] for i in np.flatnonzero(doc_sub == k)] for k in range(n_sub)]

    queries: dict[str, dict[str, str]] = {}
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    oracle: dict[str, list[str]] = {}
    used: set[tuple[int, frozenset[str]]] = set()
    for split, count in s.split_sizes:
        queries[split], qrels[split] = {}, {}
        while len(queries[split]) < count:
            k = int(rng.integers(n_sub))
            length = int(rng.integers(s.query_words[0], s.query_words[1] + 1))
            terms = rng.choice(vocab[k], size=length, replace=False).tolist()
            terms.append(str(rng.choice(background[: s.query_common_words])))
            if rng.random() < s.query_topic_word:
                terms.append(str(rng.choice(topic_vocab[k // s.subtopics_per_topic])))
            if (k, frozenset(terms)) in used:  # the same query in two splits would leak test into train
                continue
            used.add((k, frozenset(terms)))
            qid = f"Q{len(used):04d}"
            queries[split][qid] = " ".join(terms)
            qrels[split][qid] = {d: 1 for d in members[k]}
            oracle[qid] = list(own[k])
    return Collection("default", MemoryCorpus(doc_ids, titles, texts), queries, qrels), oracle


class _PseudoWords:
    """Draws pseudo-words that were never drawn before."""

    def __init__(self, rnd: random.Random):
        self.rnd = rnd
        self.taken: set[str] = set()

    def take(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            syllables = self.rnd.randint(2, 3)
            word = "".join(self.rnd.choice(_ONSETS) + self.rnd.choice(_VOWELS) for _ in range(syllables))
            word += self.rnd.choice(_FINALS)
            if word not in self.taken:
                self.taken.add(word)
                out.append(word)
        return out


def _sibling(k: int, per_topic: int, rng: np.random.Generator) -> int:
    """A random other subtopic of the same topic."""
    first = k - k % per_topic
    return first + (k % per_topic + int(rng.integers(1, per_topic))) % per_topic


def _subtopic_vocab(k: int, own: list[list[str]], s: _DefaultSpec, rng: np.random.Generator) -> list[str]:
    """A subtopic's words, most frequent first: its own, a few of a sibling's and a few of an unrelated
    subtopic's (a decoy), shuffled so that a borrowed word can be as common here as where it came from."""
    topic = k // s.subtopics_per_topic
    others = [j for j in range(len(own)) if j // s.subtopics_per_topic != topic]
    sibling = own[_sibling(k, s.subtopics_per_topic, rng)]
    decoy = own[int(rng.choice(others))]
    borrowed = rng.choice(sibling, s.sibling_words, replace=False).tolist()
    borrowed += rng.choice(decoy, s.decoy_words, replace=False).tolist()
    return rng.permutation(own[k] + borrowed).tolist()


@functools.cache
def _zipf(n: int, exponent: float = 1.0) -> np.ndarray:
    """Zipf probabilities for ranks 1..n (cached: the same few shapes are drawn thousands of times)."""
    p = 1.0 / np.arange(1, n + 1) ** exponent
    return p / p.sum()


def _default_doc(
    vocab: np.ndarray,
    sibling_vocab: np.ndarray,
    topic: np.ndarray,
    background: np.ndarray,
    s: _DefaultSpec,
    rng: np.random.Generator,
) -> tuple[str, str]:
    """One document of a subtopic that digresses into a sibling subtopic: (title, text)."""
    length = int(rng.integers(s.doc_len[0], s.doc_len[1] + 1))
    # Which subtopic words a document uses is Zipf-weighted: some are common in the subtopic, most are rare.
    n_active = int(rng.integers(s.active_words[0], s.active_words[1] + 1))
    active = rng.choice(vocab, size=n_active, replace=False, p=_zipf(len(vocab), 0.6))
    digress = rng.choice(sibling_vocab, size=s.digression_words, replace=False, p=_zipf(len(sibling_vocab), 0.6))
    n_sub = int(length * rng.uniform(*s.subtopic_share))
    n_digress = int(n_sub * rng.uniform(0, s.digression))
    n_topic = int(length * rng.uniform(*s.topic_share))
    tokens = np.concatenate([
        rng.choice(active, n_sub - n_digress, p=_zipf(n_active)),
        rng.choice(digress, n_digress),
        rng.choice(topic, n_topic, p=_zipf(len(topic))),
        rng.choice(background, length - n_sub - n_topic, p=_zipf(len(background))),
    ])
    rng.shuffle(tokens)
    title = " ".join([*active[:2], rng.choice(topic)])
    return title, " ".join(tokens.tolist())
