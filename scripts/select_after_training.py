"""A start selector fitted after training: per query, a policy's rewrite as it is or Anserini's RM3 as it is.

The selector of ``retrieval.start: choose`` (``rl.selector.fit_gains``: a logistic regression on the query
features of ``mining.query_features``, each query weighted by the R@40 at stake) fitted on the train splits'
outcomes of an existing policy, with no training, and judged on the dev splits: pooled over every collection
given, and with each collection's own train queries left out (what a collection never seen would get). The
outcomes are ``adaptive-ir evaluate --policy <policy> --data-dir <folder> --split <train|dev> --baselines
--run-dir <runs>/<name>-<split>`` runs (``<split>.agent.trec`` and ``<split>.rm3-anserini.trec``); the features are
computed over the policy's own index of each collection (its first stage, Anserini's for ``general-joint``).

    python scripts/select_after_training.py --policy general-joint --runs <runs> \\
        ../shared/datasets/nfcorpus ../shared/datasets/scifact ../shared/datasets/cranfield ../shared/datasets/cisi
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from ir_measures import parse_measure

from adaptive_ir.evaluation.metrics import per_query, read_trec_run
from adaptive_ir.inference.reformulate import Reformulator
from adaptive_ir.rl.policy import StartSelector
from adaptive_ir.rl.selector import fit_gains

SPLITS = ("train", "dev")
RUNS = ("agent", "rm3-anserini")


def outcomes(policy: str, folder: Path, runs: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{split: (query features (Q, G), per-query R@40 (Q, 2) of the agent and RM3)} of one collection."""
    ref = Reformulator.from_pretrained(policy, str(folder), device="cpu")
    out = {}
    for split in SPLITS:
        ref.ws.load_split(split)
        qids, texts, qrels = ref.ws.collection.split(split)
        _, _, feats = ref.ws.rm3_choice(list(texts), ref.ws.retriever.encode(list(texts)), store=False)
        r40 = np.stack([per_query(qrels, read_trec_run(runs / f"{folder.name}-{split}" / f"{split}.{name}.trec"),
                                  [parse_measure("R@40")], qids)["R@40"] for name in RUNS], 1)
        out[split] = (feats.astype(np.float64), r40)
    return out


def fit(data: dict, names: list[str]) -> StartSelector:
    """The selector fitted on the train queries of the collections ``names``."""
    x = np.concatenate([data[n]["train"][0] for n in names])
    sel = StartSelector(x.shape[1])
    fit_gains(sel, x, np.concatenate([data[n]["train"][1][:, 1] - data[n]["train"][1][:, 0] for n in names]))
    return sel


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="general-joint")
    p.add_argument("--runs", type=Path, required=True, help="folder of the <name>-<split> run folders")
    p.add_argument("folders", nargs="+", type=Path, help="BEIR folders (at least two)")
    args = p.parse_args()
    data = {f.name: outcomes(args.policy, f, args.runs) for f in args.folders}
    names = list(data)
    print("| queries | agent | Anserini RM3 | per-query better | selector (pooled) | selector (own train left out) |")
    print("|---|---|---|---|---|---|")
    models = {"pooled": fit(data, names)}
    models.update({n: fit(data, [m for m in names if m != n]) for n in names})
    for split in SPLITS:
        for n in names:
            x, r40 = data[n][split]
            cells = []
            for model in (models["pooled"], models[n]):
                with torch.no_grad():
                    switch = (model(torch.as_tensor(x, dtype=torch.float32)) > 0).numpy()
                cells.append(f"{np.where(switch, r40[:, 1], r40[:, 0]).mean():.4f} ({switch.mean():.0%} switched)")
            print(f"| {n} {split} ({len(x)}) | {r40[:, 0].mean():.4f} | {r40[:, 1].mean():.4f} | "
                  f"{r40.max(1).mean():.4f} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
