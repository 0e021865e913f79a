"""The two first stages a reviewer compares: the engine's default BM25 and Anserini's, as retrieval settings.

A *first stage* is the index and BM25 the rewrites start from and are scored on: analyzer, stemmer, k1, b, idf and
scoring. ``default`` is the engine's (bm25s' analyzer and impacts, k1 1.5, b 0.75, no stemming); ``anserini`` is
Anserini's BEIR "flat" BM25 at Pyserini's defaults (Lucene's English analyzer with the Porter stemmer, Lucene's BM25
with k1 0.9, b 0.4), which ``configs/scifact-anserini.yaml`` reproduces to the digit. Evaluation runs BM25 and RM3
over both, and the fixed rules over both, whichever one the agent uses (``evaluation.methods``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from adaptive_ir.config.schema import Config

DEFAULT_STAGE = "default"
ANSERINI_STAGE = "anserini"
FIRST_STAGES: dict[str, dict[str, object]] = {
    DEFAULT_STAGE: {"analyzer": "bm25s", "stemmer": "none", "bm25_k1": 1.5, "bm25_b": 0.75, "idf": "lucene",
                    "bm25_scoring": "bm25s"},
    ANSERINI_STAGE: {"analyzer": "lucene", "stemmer": "porter", "bm25_k1": 0.9, "bm25_b": 0.4, "idf": "lucene",
                     "bm25_scoring": "lucene"},
}
"""Each named first stage's ``retrieval`` settings."""


STAGE_DESCRIPTIONS = {
    DEFAULT_STAGE: "the engine's default BM25 (bm25s' analyzer, no stemming, k1 1.5, b 0.75)",
    ANSERINI_STAGE: "Anserini's BEIR flat BM25 at Pyserini's defaults (Lucene's English analyzer with the Porter "
                    "stemmer, k1 0.9, b 0.4)",
}


def stage_named(retrieval: Mapping[str, Any]) -> str | None:
    """The name of the first stage a ``retrieval`` section (as ``config_to_dict`` writes it) is, or None."""
    return next((name for name, keys in FIRST_STAGES.items()
                 if all(retrieval.get(key) == value for key, value in keys.items())), None)


def first_stage(cfg: Config) -> str | None:
    """The name of the first stage ``cfg``'s retrieval settings are, or None for other settings."""
    return stage_named(vars(cfg.retrieval))


def stage_settings(name: str) -> dict[str, object]:
    """The dotted config keys the first stage ``name`` sets: its ``retrieval`` settings, and no stem variants over a
    stemmed index (its terms are stems already)."""
    keys: dict[str, object] = {f"retrieval.{key}": value for key, value in FIRST_STAGES[name].items()}
    if FIRST_STAGES[name]["stemmer"] != "none":
        keys["candidate_mining.stem_variants"] = False
    return keys


def on_first_stage(cfg: Config, name: str) -> Config:
    """``cfg`` with the settings of the first stage ``name`` (``stage_settings``), the rest unchanged."""
    sections: dict[str, dict[str, Any]] = {}
    for key, value in stage_settings(name).items():
        section, setting = key.split(".")
        sections.setdefault(section, {})[setting] = value
    return replace(cfg, **{section: replace(getattr(cfg, section), **settings)
                           for section, settings in sections.items()})


__all__ = ["ANSERINI_STAGE", "DEFAULT_STAGE", "FIRST_STAGES", "STAGE_DESCRIPTIONS", "first_stage", "on_first_stage",
           "stage_named", "stage_settings"]
