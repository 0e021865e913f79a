"""Every method's ranked lists on one split, scored and kept as TREC runs: what ``adaptive-ir evaluate``,
``train --test`` and ``compare`` share.

Methods, over the agent's first stage (its config's index): ``bm25``; ``rm3`` (BM25 + RM3 over BM25's top 10);
``rm3-semantic`` (RM3 over the agent's own semantic feedback documents, the fixed rule the learned term choice must
beat, when ``candidate_mining.feedback`` is semantic); ``rm3-feedback`` (that rule with BM25 feedback: RM3 over
BM25's top ``candidate_mining.top_k0``, when that is not 10, where ``rm3`` already is it); ``rule-w<w>-j<j>`` (the
best fixed rule of the agent's own action space on the split: the miner's first j candidates at weight w added to
where the rewrites start, ``rule_runs``); ``agent`` (greedy rewrites of a trained policy, which never sees qrels);
``oracle`` (greedy best-term choice with the qrels).

The field's baselines, whichever first stage the agent uses (``config.stages``): ``bm25-anserini`` and
``rm3-anserini``, Anserini's BM25 and RM3 at Pyserini's defaults (``set_rm3()``, equal to Pyserini's own runs);
and ``bm25-default`` and ``rm3-default``, the engine's default BM25 and its RM3, when the agent's first stage is
not that one. The fixed rules run over both first stages (those over the other one named ``<rule>-<stage>``), and
the best rule on the split is the best over both; ``dev-chosen-<method>`` (on any split but dev) is the fixed rule,
over either stage, with the best R@40 on dev, as a setting is chosen. Metrics are means over every query of the
split (``evaluate.per_query`` says which count as 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from adaptive_ir.common.amp import AmpContext
from adaptive_ir.common.errors import DataError
from adaptive_ir.config import ANSERINI_STAGE, DEFAULT_STAGE, FIRST_STAGES, Config, first_stage
from adaptive_ir.evaluation.agent import agent_run
from adaptive_ir.evaluation.metrics import (
    RM3_FB_DOCS,
    CompactRun,
    Judged,
    Run,
    bm25_run,
    drop_excluded,
    evaluate_run,
    mean_recall,
    report_measures,
    rm3_anserini_run,
    rm3_run,
    write_trec_run,
)
from adaptive_ir.evaluation.oracle import oracle_run
from adaptive_ir.evaluation.risk import risk_table
from adaptive_ir.rl.policy import Agent
from adaptive_ir.rl.workspace import Workspace

SELECTION_METRIC = "R@40"
"""A fixed rule is chosen among others (the action-space rules here, the best fixed rule in ``compare``) by its mean
of this metric on the split it is evaluated on: a choice that favours the rule."""
RULE_DEPTHS = (1, 2, 3, 5, 8, 10)
"""How many of the miner's first candidates a fixed rule adds (those within the step budget)."""
RULE_PREFIX = "rule-"
DEV_SPLIT = "dev"
DEV_CHOSEN = "dev-chosen-"
"""Prefix of the fixed rule (any of ``fixed_rule_runs``) with the higher mean SELECTION_METRIC on the dev split, run
on the split evaluated: the bar chosen as every setting is, on dev (the best on the split itself favours the rule)."""


METHOD_KINDS = ("bm25", "rm3", "rm3-feedback", "rule", "dev-chosen", "agent", "oracle")
"""What a method is: BM25; RM3 at its defaults; RM3 over the agent's own feedback documents (``rm3-semantic``,
``rm3-feedback``); a rule of the action space; the rule chosen on dev; the agent; the oracle."""


@dataclass(frozen=True)
class Method:
    """One row of a table, as its name says it: ``<name>[-<stage>]`` (``field_stages``: over another first stage
    than the agent's), ``dev-chosen-<method>``. Its kind says which comparisons it enters: the baselines are BM25
    and RM3 at their defaults (the rows a reviewer runs), the fixed rules are every expansion without learning
    (RM3 too, and the rules of the agent's action space)."""

    name: str
    kind: str
    """One of METHOD_KINDS."""
    stage: str | None
    """The first stage it runs over when not the agent's own (``bm25-anserini``: ``anserini``), else None."""

    @classmethod
    def of(cls, name: str) -> Method:
        if name.startswith(DEV_CHOSEN):
            return cls(name, "dev-chosen", cls.of(name.removeprefix(DEV_CHOSEN)).stage)
        base, stage = name, None
        for s in FIRST_STAGES:
            if name.endswith(f"-{s}"):
                base, stage = name.removesuffix(f"-{s}"), s
        if base.startswith(RULE_PREFIX):
            return cls(name, "rule", stage)
        kind = {"rm3-semantic": "rm3-feedback"}.get(base, base)
        if kind not in METHOD_KINDS:
            raise ValueError(f"{name}: not a method name of this engine")
        return cls(name, kind, stage)

    @property
    def baseline(self) -> bool:
        return self.kind in ("bm25", "rm3")

    @property
    def fixed_rule(self) -> bool:
        return self.kind in ("rm3", "rm3-feedback", "rule")


def rule_runs(cfg: Config, ws: Workspace, split: str, qids: list[str], texts: list[str],
              levels: tuple[float, ...] | None = None, depths: tuple[int, ...] | None = None,
              from_rm3: bool = False) -> dict[tuple[float, int], Run]:
    """The fixed rules in the agent's own action space, {(w, j): run}: every query gets the miner's first j candidates
    at weight w, added to where the agent's rewrites start (its words, or their RM3 expansion: ``retrieval.start``).
    Same candidates, same weights, no learning. ``levels`` default to the config's weights, ``depths`` to
    ``RULE_DEPTHS`` within ``rl_agent.max_steps_per_episode``; j = 0 is the start itself. ``from_rm3``: added to
    the other start of ``retrieval.start: choose`` (the query's RM3 expansion) instead."""
    levels = cfg.retrieval.levels if levels is None else levels
    if depths is None:
        depths = tuple(j for j in RULE_DEPTHS if j <= cfg.rl_agent.max_steps_per_episode)
    terms = ws.retriever.encode(texts)
    cands = ws.candidates(split, texts, terms)
    start, start_weights = ws.rm3_choice(texts, terms)[:2] if from_rm3 else ws.start_queries(texts, terms)
    if start_weights is None:
        start_weights = [[1.0] * len(q) for q in start]
    # every depth of one weight in one pass over each query's postings: a candidate that is not valid is a pad slot,
    # which adds nothing, so the first j slots are the valid ones among the first j candidates
    pad, most = ws.retriever.index.pad_id, max(depths, default=0)
    added = [[int(t) if ok else pad for t, ok in zip(row[:most], valid[:most])]
             for row, valid in zip(cands.terms, cands.valid)]
    out: dict[tuple[float, int], Run] = {}
    marks = sorted(set(depths))
    for w in levels:
        scores, idx = ws.retriever.search_prefixes(start, start_weights, added, w, marks, cfg.retrieval.top_k)
        for j in depths:  # dozens of rules: kept compact
            out[(w, j)] = CompactRun(qids, ws.retriever.doc_ids, scores[:, marks.index(j)], idx[:, marks.index(j)])
    return out  # weight-major, as the script prints them


def field_stages(cfg: Config) -> list[str]:
    """The first stages whose ``bm25-<stage>`` / ``rm3-<stage>`` rows a table carries: Anserini's always, the
    default one unless it is the agent's own (then ``bm25`` and ``rm3`` are those rows)."""
    own = first_stage(cfg)
    return [stage for stage in FIRST_STAGES if not (stage == own == DEFAULT_STAGE)]


def own_fixed_rule_runs(cfg: Config, ws: Workspace, split: str, qids: list[str], texts: list[str],
                        rm3: bool = True) -> dict[str, Run]:
    """The fixed rules of one workspace, {method: run}: ``rm3`` (unless ``rm3`` is False); RM3 over the agent's
    own feedback documents (``rm3-semantic``, or ``rm3-feedback`` with BM25's top ``top_k0`` when that is not rm3's
    10); the action space's rules ``rule-w<w>-j<j>`` (``rule_runs``), and with ``retrieval.start: choose`` those
    added to the query's RM3 expansion, ``rule-rm3-w<w>-j<j>``."""
    top_k, fb_docs = cfg.retrieval.top_k, cfg.candidate_mining.top_k0
    runs = {"rm3": rm3_run(ws.retriever, qids, texts, top_k)} if rm3 else {}
    if ws.feedback is not None:
        runs["rm3-semantic"] = rm3_run(ws.retriever, qids, texts, top_k, fb_docs=fb_docs, feedback=ws.feedback,
                                       query_vectors=ws.feedback_vectors(texts))
    elif fb_docs != RM3_FB_DOCS:
        runs["rm3-feedback"] = rm3_run(ws.retriever, qids, texts, top_k, fb_docs=fb_docs)
    runs.update({f"{RULE_PREFIX}w{w:g}-j{j}": run for (w, j), run in rule_runs(cfg, ws, split, qids, texts).items()})
    if cfg.retrieval.start == "choose":  # the rules from the other start too: the same space as the agent's
        runs.update({f"{RULE_PREFIX}rm3-w{w:g}-j{j}": run
                     for (w, j), run in rule_runs(cfg, ws, split, qids, texts, from_rm3=True).items()})
    return runs


def stage_rule_runs(ws: Workspace, sws: Workspace, stage: str, split: str, qids: list[str], texts: list[str]
                    ) -> dict[str, Run]:
    """The fixed rules of the first stage ``stage`` (``sws``, from ``ws.on_stage``) on a split, {method: run}:
    ``rm3-<stage>`` (Anserini's own RM3 over its index, ours over the default one) and, when that stage is not the
    agent's own, its rules named ``<rule>-<stage>``."""
    # our RM3 over that index is the stage's RM3, unless the stage is Anserini's (which has its own: not searched)
    other = {} if sws is ws else own_fixed_rule_runs(sws.cfg, sws, split, qids, texts, rm3=stage != ANSERINI_STAGE)
    ours = other.pop("rm3", None)
    runs = {}
    if stage == ANSERINI_STAGE:
        runs[f"rm3-{stage}"] = rm3_anserini_run(sws.retriever, qids, texts, sws.cfg.retrieval.top_k)
    else:
        assert ours is not None  # field_stages: another stage than the agent's own
        runs[f"rm3-{stage}"] = ours
    runs.update({f"{m}-{stage}": run for m, run in other.items()})
    return runs


def fixed_rule_runs(cfg: Config, ws: Workspace, splits: dict[str, tuple[list[str], list[str]]]
                    ) -> tuple[dict[str, dict[str, Run]], dict[str, Run]]:
    """Every fixed rule over both first stages on each of ``splits`` ({split: (qids, texts)}), and BM25 over each
    field stage on the first split: ({split: {method: run}}, {``bm25-<stage>``: run}). The agent's own rules
    (``own_fixed_rule_runs``) and each other stage's (``stage_rule_runs``), that stage's workspace entered once for
    every split and released before the next: one extra index in memory at a time."""
    rules = {split: own_fixed_rule_runs(cfg, ws, split, qids, texts) for split, (qids, texts) in splits.items()}
    bm25: dict[str, Run] = {}
    first = next(iter(splits))
    for stage in field_stages(cfg):
        with ws.on_stage(stage) as sws:
            if sws is not ws:
                bm25[f"bm25-{stage}"] = bm25_run(sws.retriever, *splits[first], cfg.retrieval.top_k)
            for split, (qids, texts) in splits.items():
                rules[split].update(stage_rule_runs(ws, sws, stage, split, qids, texts))
    return rules, bm25


def best_method(runs: dict[str, Run], names: list[str], qrels: dict[str, dict[str, int]], excluded: dict[str, str],
                qids: list[str]) -> str:
    """The one of ``names`` whose run has the higher mean SELECTION_METRIC (the first, on a tie)."""
    k = int(SELECTION_METRIC.removeprefix("R@"))  # a recall: read off the runs' arrays (``mean_recall``)
    compact = [run for run in (runs[m] for m in names) if isinstance(run, CompactRun)]
    doc_ids = compact[0].doc_ids if compact else None
    judged = None if doc_ids is None else Judged.of(qrels, qids, doc_ids, excluded)  # once, for every run on them
    score = {m: mean_recall(qrels, runs[m], k, qids, excluded,
                            judged if getattr(runs[m], "doc_ids", None) is doc_ids else None) for m in names}
    return max(score, key=score.__getitem__)


def has_split(ws: Workspace, split: str) -> bool:
    """Whether the collection has ``split`` (read on demand)."""
    try:
        ws.load_split(split)
    except DataError:  # a collection without that split: its loader names what it did not find
        return False
    return split in ws.collection.queries


def split_runs(cfg: Config, ws: Workspace, split: str, agent: Agent | None = None, amp: AmpContext | None = None,
               baselines: bool = True, oracle: bool = False
               ) -> tuple[list[str], dict[str, dict[str, int]], dict[str, Run]]:
    """(the split's qids, its qrels, {method: run}) for the methods asked for; the split is loaded on demand (the
    test split is read only here, never while training)."""
    ws.load_split(split)
    qids, texts, qrels = ws.collection.split(split)
    excluded = ws.collection.excluded_docs(split)  # data.exclude_query_title: dropped from every method's list
    top_k = cfg.retrieval.top_k
    runs: dict[str, Run] = {}
    if baselines:
        runs["bm25"] = bm25_run(ws.retriever, qids, texts, top_k)
        splits = {split: (qids, texts)}
        if split != DEV_SPLIT and has_split(ws, DEV_SPLIT):  # for the rule one would pick on dev
            dqids, dtexts, _ = ws.collection.split(DEV_SPLIT)
            splits[DEV_SPLIT] = (dqids, dtexts)
        rules_by_split, field_bm25 = fixed_rule_runs(cfg, ws, splits)
        for stage in field_stages(cfg):
            runs[f"bm25-{stage}"] = field_bm25.get(f"bm25-{stage}", runs["bm25"])
        fixed = rules_by_split[split]
        rules = [m for m in fixed if Method.of(m).kind == "rule"]
        runs.update({m: run for m, run in fixed.items() if m not in rules})
        if rules:  # the best on this split, over both first stages, as the best fixed rule is picked
            best = best_method(fixed, rules, qrels, excluded, qids)
            runs[best] = fixed[best]
        if DEV_SPLIT in splits and split != DEV_SPLIT:
            # the fixed rule one would pick without this split's judgments: the best on dev, as any setting is
            dqids, _, dqrels = ws.collection.split(DEV_SPLIT)
            on_dev = rules_by_split[DEV_SPLIT]
            chosen = best_method(on_dev, list(on_dev), dqrels, ws.collection.excluded_docs(DEV_SPLIT), dqids)
            runs[DEV_CHOSEN + chosen] = fixed[chosen]
    if agent is not None:
        assert amp is not None  # an agent is evaluated with its precision context
        qs, tables = ws.query_set(split, qids, texts, None)  # the agent never sees qrels at evaluation
        runs["agent"], _ = agent_run(cfg, ws, agent, amp, qs, tables)
    if oracle:
        qs, _ = ws.query_set(split, qids, texts, qrels)
        rc = cfg.retrieval
        runs["oracle"] = oracle_run(qs, ws.retriever.index, ws.retriever.doc_ids, cfg.rl_agent.max_steps_per_episode,
                                    rc.reward_k, cfg.reward_terms,
                                    rc.levels, top_k)
    return qids, qrels, {name: drop_excluded(run, excluded) for name, run in runs.items()}


def write_runs(run_dir: str | Path, split: str, runs: dict[str, Run]) -> None:
    """``<run_dir>/<split>.<method>.trec`` for every run."""
    for name, run in runs.items():
        write_trec_run(Path(run_dir) / f"{split}.{name}.trec", run, name)


def evaluate_split(cfg: Config, ws: Workspace, agent: Agent | None, amp: AmpContext | None, split: str,
                   baselines: bool = True, run_dir: Path | None = None, oracle: bool = False,
                   risk: dict | None = None) -> dict[str, dict[str, float]]:
    """{method: {metric: mean over every query of the split}}; TREC runs written to ``run_dir`` when given;
    ``risk``, when given and there are an agent and baselines, is filled with ``risk.risk_table`` of the agent
    against each baseline and the dev-chosen rule."""
    qids, qrels, runs = split_runs(cfg, ws, split, agent, amp, baselines, oracle)
    if run_dir is not None:
        write_runs(run_dir, split, runs)
    against = [m for m in runs if Method.of(m).baseline or Method.of(m).kind == "dev-chosen"]
    if risk is not None and "agent" in runs and against:
        risk.update(risk_table(qrels, runs, qids, "agent", against))
    measures = report_measures(cfg.retrieval.top_k)
    return {name: evaluate_run(qrels, run, measures, qids=qids) for name, run in runs.items()}
