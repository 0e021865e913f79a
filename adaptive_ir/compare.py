"""``adaptive-ir compare``: one training run per seed, every method evaluated on one split, and a table a reviewer
can check: mean ± std over seeds per method and metric, and paired per-query tests of the agent against BM25,
against the best baseline on the split (BM25 or RM3, over either first stage), against the best fixed rule on the
split and against the fixed rule chosen on dev.

Layout under the output folder (``--output-dir``, default ``training.output_dir``)::

    cache/                          caches shared by the seeds (unless embeddings.cache_dir names another)
    seed-<s>/                       seed s's training run: checkpoints/, logs/, trained.json (written when done)
    seed-<s>/runs/<split>.agent.trec
    runs/<split>.<method>.trec      bm25, rm3, rm3-semantic or rm3-feedback, bm25-anserini, rm3-anserini,
                                    (bm25-default, rm3-default), rule-w<w>-j<j>[-<stage>], dev-chosen-<rule>
                                    (methods.py), oracle
    compare-<split>.json, .md       the table

Every seed trains on the same train queries and is selected on the same dev queries: a carved dev split uses
``data.split_seed`` (pinned to the config's seed when unset), not the training seed. Checkpoint and log folders
always go under the seed's folder. A second run of the same command reuses finished seeds (``trained.json``),
resumes an interrupted one from its ``last.pt`` and refuses a folder trained with other settings.

With ``--split dev`` the test judgments are never opened, so settings can be chosen with it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from adaptive_ir.artifacts.checkpoint import SavedPolicy, init_policy_path, load_agent, load_checkpoint
from adaptive_ir.common.errors import CheckpointError, ConfigError
from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json
from adaptive_ir.config import Config, config_from_dict, config_to_dict, resolve_device
from adaptive_ir.evaluation.methods import SELECTION_METRIC, Method, split_runs, write_runs
from adaptive_ir.evaluation.metrics import METRIC_NAMES, per_query
from adaptive_ir.evaluation.stats import N_PERMUTATIONS, PERMUTATION_SEED, SMALL_SPLIT, mean_std, paired
from adaptive_ir.rl.workspace import Workspace
from adaptive_ir.training.run import run_training

if TYPE_CHECKING:
    from adaptive_ir.training.trainer import Trainer

log = logging.getLogger(__name__)

DONE_FILE = "trained.json"
"""Written into a seed's folder once its training has finished: the config it ran and the trainer's summary."""
UNCHECKED_KEYS = {("system", "device"), ("system", "num_workers"), ("training", "output_dir"),
                  ("embeddings", "cache_dir")}
"""Settings that do not change what a seed's run computes (a run trained on another device, or moved, still
counts)."""


class CompareInterrupted(Exception):
    """Training of one seed was stopped by SIGINT / SIGTERM (its last.pt is saved; the same command resumes)."""

    def __init__(self, seed: int, signal: int):
        super().__init__(f"training of seed {seed} was interrupted")
        self.seed, self.signal = seed, signal


def parse_seeds(text: str) -> list[int]:
    """'1,2,3' → [1, 2, 3] (distinct non-negative integers)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: expected comma-separated integers, e.g. 1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"--seeds {text!r}: expected distinct non-negative integers, e.g. 1,2,3")
    return seeds


def seed_config(cfg: Config, seed: int, root: Path) -> Config:
    """``cfg`` for the run of one seed: its own folder, the shared caches, the pinned dev carving."""
    c = config_from_dict(config_to_dict(cfg), source=cfg.source)
    c.system.seed = seed
    c.data.split_seed = cfg.split_seed
    c.training.output_dir = str(root / f"seed-{seed}")
    c.training.checkpoint_dir = c.training.log_dir = None
    c.embeddings.cache_dir = cfg.embeddings.cache_dir or str(root / "cache")
    return c


def _same_settings(cfg: Config, stored: dict, where: Path) -> None:
    # the stored config is read as a config first: one saved before the seed project's keys left the schema
    # holds them, and they are translated as on loading, not compared one by one
    stored = config_to_dict(config_from_dict(stored, str(where)))
    ours, stored = json.loads(json.dumps(config_to_dict(cfg))), json.loads(json.dumps(stored))
    diff = [f"{section}.{key}: {value!r} there, {ours[section].get(key)!r} now"
            for section, keys in stored.items() for key, value in keys.items()
            if (section, key) not in UNCHECKED_KEYS and ours.get(section, {}).get(key) != value]
    if diff:
        raise ConfigError(f"{where} was trained with other settings ({'; '.join(diff[:5])}); "
                          "pass another --output-dir, or delete that seed's folder to train it again")


def _same_source(cfg: Config, stored_sha256: str | None, where: Path) -> None:
    """A seed that started from training.init_from is reused only while that file is the one it started from
    (the digest a run records is ``SavedPolicy.read``'s; a source that is missing now is not compared)."""
    path = init_policy_path(cfg) if cfg.training.init_from else None
    if path is not None and path.exists() and SavedPolicy.read(path).sha256 != stored_sha256:
        raise ConfigError(f"{where} was trained from another policy than {path} holds now (its "
                          "source run was trained again?); delete that seed's folder to train it from this one, or "
                          "pass another --output-dir")


def train_seed(cfg: Config, progress: bool) -> Trainer | None:
    """Train one seed's run unless it has finished already (then None). Resumes from ``last.pt`` if there is
    one. Raises CompareInterrupted when stopped by a signal."""
    out = Path(cfg.training.output_dir)
    done, last = out / DONE_FILE, cfg.training.checkpoint_path_dir / "last.pt"
    if done.is_file():
        record = json.loads(done.read_text(encoding="utf-8"))
        _same_settings(cfg, record["config"], done)
        _same_source(cfg, record.get("init_from_sha256"), done)
        log.info("seed %d: finished run in %s, evaluating it", cfg.system.seed, out)
        return None
    if last.is_file():
        state = load_checkpoint(last)
        _same_settings(cfg, state["config"], last)
        _same_source(cfg, state.get("init_from_sha256"), last)
    # the seed's folder is a run folder like any other: locked while it trains, run.json says what produced it
    trained = run_training(cfg, resume=last.is_file(), progress=progress)
    if trained.result["interrupted"]:
        stop_signal = trained.trainer.stop_signal
        assert stop_signal is not None, "Trainer.train: interrupted is stop_signal is not None"
        raise CompareInterrupted(cfg.system.seed, stop_signal)
    atomic_write_json(done, {"config": config_to_dict(cfg), "result": trained.result,
                             "init_from_sha256": trained.trainer.init_sha256})
    return trained.trainer


def seed_agent(cfg: Config, trainer: Trainer | None, split: str, progress: bool):
    """(workspace, agent, amp) of one seed's run with its best checkpoint loaded, over the trainer's own workspace
    when it just trained, else over a new one that reads only ``split``'s judgments."""
    device = torch.device(resolve_device(cfg.system.device))
    ws = trainer.ws if trainer is not None else Workspace(cfg, device, progress=progress, splits=(split,))
    agent, amp, _ = load_agent(cfg.training.checkpoint_path_dir / "best.pt", cfg, ws, device)
    return ws, agent, amp


@dataclass
class Evaluated:
    """Per-query values of every method on one split: ``values[method]`` holds one ``{metric: (n,) array}`` per
    seed for the agent, a single one for the deterministic methods."""

    collection: str
    split: str
    qids: list[str]
    seeds: list[int]
    values: dict[str, list[dict[str, np.ndarray]]]
    run_files: dict[str, list[str]]


def compare(cfg: Config, seeds: list[int], split: str = "test", skip_train: bool = False, progress: bool = True,
            n_permutations: int = N_PERMUTATIONS) -> tuple[dict, str]:
    """Train (unless ``skip_train``) and evaluate every seed, then write and return the report (JSON-able dict,
    Markdown)."""
    root = Path(cfg.training.output_dir)
    configs = [seed_config(cfg, seed, root) for seed in seeds]
    missing = [str(c.training.checkpoint_path_dir / "best.pt") for c in configs
               if not (c.training.checkpoint_path_dir / "best.pt").is_file()]
    if skip_train and missing:
        raise CheckpointError(f"--skip-train: no checkpoint {', '.join(missing)}; run compare without --skip-train "
                              "to train those seeds")
    values: dict[str, list[dict[str, np.ndarray]]] = {}
    run_files: dict[str, list[str]] = {}
    for scfg in configs:
        trainer = None if skip_train else train_seed(scfg, progress)
        ws, agent, amp = seed_agent(scfg, trainer, split, progress)
        # the baselines and the oracle do not depend on the training seed: computed once
        first = not values
        qids, qrels, runs = split_runs(scfg, ws, split, agent, amp, baselines=first, oracle=first)
        name = ws.collection.name
        for m, run in runs.items():
            folder = Path(scfg.training.output_dir if m == "agent" else root) / "runs"
            write_runs(folder, split, {m: run})
            run_files.setdefault(m, []).append(str(folder / f"{split}.{m}.trec"))
            values.setdefault(m, []).append(per_query(qrels, run, qids=qids))
        del trainer, ws, agent, runs
    result = Evaluated(name, split, qids, seeds, values, run_files)
    report = build_report(result, n_permutations)
    text = format_report(report)
    atomic_write_json(root / f"compare-{split}.json", report)
    atomic_write_bytes(root / f"compare-{split}.md", (text + "\n").encode("utf-8"))
    return report, text


def build_report(ev: Evaluated, n_permutations: int = N_PERMUTATIONS, seed: int = PERMUTATION_SEED) -> dict:
    """Means, spreads and paired tests of an evaluation (see the module docstring)."""
    n = len(ev.qids)
    methods: dict[str, dict[str, Any]] = {}
    for m, per_seed in ev.values.items():
        spread = {k: mean_std([v[k].mean() for v in per_seed]) for k in METRIC_NAMES}
        methods[m] = {"deterministic": m != "agent", "mean": {k: s[0] for k, s in spread.items()},
                      "std": {k: (0.0 if m != "agent" else s[1]) for k, s in spread.items()},
                      "run_files": ev.run_files.get(m, [])}
        if m == "agent":
            methods[m]["per_seed"] = {str(s): {k: float(v[k].mean()) for k in METRIC_NAMES}
                                      for s, v in zip(ev.seeds, per_seed)}
    kinds = {m: Method.of(m) for m in ev.values}
    rules = [r for r, method in kinds.items() if method.fixed_rule]
    best_rule = max(rules, key=lambda r: methods[r]["mean"][SELECTION_METRIC]) if rules else None
    baselines = [b for b, method in kinds.items() if method.baseline]
    best_baseline = max(baselines, key=lambda b: methods[b]["mean"][SELECTION_METRIC]) if baselines else None
    dev_chosen = next((m for m, method in kinds.items() if method.kind == "dev-chosen"), None)
    tests = {}
    if "agent" in ev.values:
        agent = {k: np.mean([v[k] for v in ev.values["agent"]], axis=0) for k in METRIC_NAMES}
        for other in dict.fromkeys([b for b in ("bm25", best_baseline, best_rule, dev_chosen) if b in ev.values]):
            tests[other] = [paired(k, agent[k], ev.values[other][0][k], n_permutations, seed).to_dict()
                            for k in METRIC_NAMES]
    return {"collection": ev.collection, "split": ev.split, "queries": n, "small_split": n < SMALL_SPLIT,
            "seeds": ev.seeds, "methods": methods, "best_baseline": best_baseline, "best_fixed_rule": best_rule,
            "dev_chosen_rule": dev_chosen,
            "best_fixed_rule_by": f"higher mean {SELECTION_METRIC} on this split, among {', '.join(rules)}",
            "best_baseline_by": f"higher mean {SELECTION_METRIC} on this split, among {', '.join(baselines)}",
            "tests": tests, "permutations": n_permutations, "permutation_seed": seed}


def _p(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.0e}"


def format_report(r: dict) -> str:
    """The report as Markdown: the methods table, then the paired tests."""
    n, seeds = r["queries"], r["seeds"]
    small = f" — **small split** (n = {n} < {SMALL_SPLIT}: one query moves a mean by {1 / n:.1%})" \
        if r["small_split"] else ""
    seeds_text = f"{len(seeds)} training seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, seeds))})"
    lines = [f"**{r['collection']} / {r['split']}: {n} queries, {seeds_text}**{small}", "",
             "| method | " + " | ".join(METRIC_NAMES) + " |", "|---" * (len(METRIC_NAMES) + 1) + "|"]
    for m, s in r["methods"].items():
        if s["deterministic"]:
            cells = [f"{s['mean'][k]:.4f}" for k in METRIC_NAMES]
        else:
            cells = [f"{s['mean'][k]:.4f} ± " + ("–" if s["std"][k] is None else f"{s['std'][k]:.4f}")
                     for k in METRIC_NAMES]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "Agent: mean ± sample std (ddof 1) over the seeds' split means. "
              + ", ".join(m for m, s in r["methods"].items() if s["deterministic"])
              + ": deterministic (no training), std 0."]
    if r["tests"]:
        per_query_value = f"the mean over the {len(seeds)} seeds" if len(seeds) > 1 else "one seed"
        chosen = (f", and against the fixed rule chosen on dev ({r['dev_chosen_rule']}: the higher mean "
                  f"{SELECTION_METRIC} on the dev split among the same rules, as a setting is chosen)"
                  if r.get("dev_chosen_rule") else "")
        best = (f", against the best baseline ({r['best_baseline']}: {r['best_baseline_by']})"
                if r.get("best_baseline") else "")
        lines += ["", f"Paired per-query tests of the agent (its per-query value: {per_query_value}) against BM25{best} "
                  f"and against the best fixed rule ({r['best_fixed_rule']}: "
                  f"{r['best_fixed_rule_by']}){chosen}. p: two-sided sign-flip randomization test ({r['permutations']:,} "
                  f"random sign assignments, seed {r['permutation_seed']}; exact when 2^n is fewer) and scipy's "
                  "paired t-test. W/T/L: queries where the agent is above / equal to / below. MDE: the smallest |Δ| "
                  "the t-test over these queries finds with 80 % power at 0.05, at the observed spread of the "
                  "differences (`stats.min_detectable_effect`).", "",
                  "| agent vs | metric | agent | other | Δ | p (randomization) | p (t-test) | W / T / L | MDE |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for other, rows in r["tests"].items():
            for t in rows:
                lines.append(f"| {other} | {t['metric']} | {t['mean_a']:.4f} | {t['mean_b']:.4f} | "
                             f"{t['delta']:+.4f} | {_p(t['p_randomization'])} | {_p(t['p_t'])} | "
                             f"{t['wins']} / {t['ties']} / {t['losses']} | {t['mde']:.4f} |")
    return "\n".join(lines)


__all__ = ["compare", "build_report", "format_report", "parse_seeds", "seed_config",
           "Evaluated", "CompareInterrupted"]
