"""What a whole command costs, phase by phase, and how that grows with the corpus.

    python benchmarks/run_cost.py run --json benchmarks/results/run_cost_large8m.json -- adaptive-ir train \\
        --config wikicar-anserini --data-dir <folder> --seed 42 --test --no-progress --output-dir <run> \\
        --set embeddings.cache_dir=<an empty folder>
    python benchmarks/run_cost.py fit benchmarks/results/run_cost_{wikicar,large3m,large8m}.json \\
        --json benchmarks/results/cost_curve_run.json --plot docs/cost_curve_run.png

``run`` starts the command, samples the memory of its process tree every second (the summed PSS, from
``/proc/<pid>/smaps_rollup``: the index's worker processes share their parent's pages, which summed RSS would
count once per process) and stamps each line of its output with the seconds since the start (the log is kept beside
--json, ``.log``); it writes the wall time, the peak of the samples, the kernel's peak RSS of the command's largest
process (``ru_maxrss``, what ``/usr/bin/time`` reports), and each phase the command logged (``phase NAME: TIME (peak
RSS ...)``, the engine's ``Phases``) with its seconds and the peak of the samples taken while it ran. A phase that runs more than once (mining per split) is one row per run. The
collection's size is read off the index's log line. ``log`` makes the same JSON from a stamped log alone (a run
stopped part way: its phases so far, no memory samples). ``fit`` groups the phases of runs at several sizes (load,
index, embedding model, mining, training, test, ...; a phase run inside another counts once, in the outer one:
training holds its dev evaluations and the dev selection; everything after training is the test phase, whatever
its phases; "other" is the time between phases), fits each group's seconds and the run's peaks against the
number of documents with a line, and draws them; JSONs of one size are one run in parts (one that went on from the
caches another wrote, in the order given): a later part's first phases, as long as an earlier part ran them too,
are its reads of what that part computed and are left out, with their seconds; the rest is joined, the wall times
added, the peaks the larger.

    python benchmarks/run_cost.py log <run_cost's .log of the first part> --json <part1>.json
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import threading
import time
from pathlib import Path

from process_memory import family, pss_rss_kib

PHASE = re.compile(r"phase (?P<name>.+?): (?P<time>[\d.]+ s|\d+ min \d+ s|\d+ h \d+ min) \(peak RSS "
                   r"(?P<rss>[\d.]+) GiB\)")
DOCS = re.compile(r"index: (\d+) documents")
TRAINING = re.compile(r"trainer: training (?P<s>[\d.]+) s \(\d+ updates\)")
"""The trainer's own account of its loop (collect, update, dev evaluations), which is not a ``phase`` line."""
GROUPS = (("load", ("load collection",)), ("index", ("index",)), ("embedding model", ("embedding model",)),
          ("mining", ("mine ", "query set ", "RM3 ")), ("embedding", ("embed ",)), ("training", ("training",)),
          ("dev", ("dev evaluation", "dev selection")), ("test", ("test", "evaluate", "baselines")))
"""Phase name prefixes of each group the fit reports (first match wins; a phase matching none is "other")."""


def seconds_of(text: str) -> float:
    """``8.2 s``, ``12 min 40 s`` or ``3 h 05 min`` (``common.progress.duration``) in seconds."""
    n = [float(x) for x in re.findall(r"[\d.]+", text)]
    if "h" in text.split():
        return n[0] * 3600 + n[1] * 60
    return n[0] * 60 + n[1] if "min" in text else n[0]


def parse(lines: list[tuple[float, str]], samples: list[tuple[float, float]]) -> dict:
    """The phases of a stamped log, each with the peak of the memory samples (GiB) taken while it ran."""
    phases, docs = [], None
    for t, line in lines:
        if docs is None and (m := DOCS.search(line)):
            docs = int(m[1])
        if m := TRAINING.search(line):
            found = ("training", float(m["s"]), None)
        elif m := PHASE.search(line):
            found = (m["name"], seconds_of(m["time"]), float(m["rss"]))
        else:
            continue
        name, s, rss = found
        inside = [r for at, r in samples if t - s - 1 <= at <= t]
        phases.append({"name": name, "seconds": s, "end_s": t, "process_peak_rss_gib": rss,
                       "peak_pss_gib": round(max(inside, default=0.0), 2)})
    return {"num_docs": docs, "phases": phases}


def run(args) -> None:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    log_path = Path(args.json).with_suffix(".log")
    start = time.time()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        while proc.poll() is None:
            samples.append((time.time() - start, pss_rss_kib(family(proc.pid))[0] / 2 ** 20))
            time.sleep(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    with open(log_path, "w") as log:
        for line in proc.stdout:
            lines.append((time.time() - start, line.rstrip("\n")))
            log.write(f"{lines[-1][0]:.0f} {line}")
            log.flush()
    proc.wait()
    sampler.join()
    result = {"command": " ".join(command), "exit_status": proc.returncode, "wall_s": round(time.time() - start, 1),
              "peak_pss_gib": round(max((r for _, r in samples), default=0.0), 2),
              "max_rss_gib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20, 2),
              **parse(lines, samples),
              "pss_timeline": [(round(t), round(r, 2)) for t, r in samples[::args.every]]}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("phases", "pss_timeline")}))


def from_log(args) -> None:
    lines = []
    for line in Path(args.log).read_text().splitlines():
        stamp, _, text = line.partition(" ")
        lines.append((float(stamp), text))
    parsed = parse(lines, [])
    # the engine's own peak RSS so far, logged with each phase: the largest process's, as ru_maxrss would be
    rss = max((ph["process_peak_rss_gib"] for ph in parsed["phases"] if ph["process_peak_rss_gib"]), default=None)
    result = {"command": f"(from {args.log})", "exit_status": None, "wall_s": lines[-1][0] if lines else 0.0,
              "peak_pss_gib": None, "max_rss_gib": rss, **parsed}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "phases"}))


def joined(parts: list[dict]) -> dict:
    """One run from runs at the same size, in order (``fit``)."""
    peak = lambda key: max((p[key] for p in parts if p.get(key) is not None), default=None)  # noqa: E731
    phases, done, wall, test = [], set(), 0.0, 0.0
    for part in parts:
        reads = 0  # the leading phases an earlier part ran: cache reads (a later "index" is a build of its own)
        while reads < len(part["phases"]) and part["phases"][reads]["name"] in done:
            reads += 1
        # everything after training and dev selection is the test phase (the other first stage's index and
        # mining, the baselines, the agent, the oracle): one group, its time the part's tail
        ends = [ph["end_s"] for ph in part["phases"] if group_of(ph["name"]) in ("training", "dev")]
        cut = max(ends, default=None)
        kept = [ph for ph in part["phases"][reads:] if cut is None or ph["end_s"] <= cut]
        # a phase run inside another (the dev split mined within dev selection) is counted once, in the outer one
        phases += [ph for ph in kept if not any(_inside(ph, outer) for outer in kept if outer is not ph)]
        if cut is not None:
            test += part["wall_s"] - cut
        wall += part["wall_s"] - sum(ph["seconds"] for ph in part["phases"][:reads])
        done |= {ph["name"] for ph in part["phases"]}
    return {"num_docs": parts[0]["num_docs"], "wall_s": round(wall, 1), "max_rss_gib": peak("max_rss_gib"),
            "peak_pss_gib": peak("peak_pss_gib"), "phases": phases, "test_s": round(test, 1),
            "source": " + ".join(p["source"] for p in parts)}


def _inside(ph: dict, outer: dict) -> bool:
    """Whether phase ``ph`` ran within ``outer`` (both from one log: ``end_s`` since its start)."""
    slack = 0.5  # the stamps are the log lines' seconds
    return (outer["seconds"] > ph["seconds"] and outer["end_s"] + slack >= ph["end_s"]
            and outer["end_s"] - outer["seconds"] - slack <= ph["end_s"] - ph["seconds"])


def group_of(name: str) -> str:
    return next((g for g, prefixes in GROUPS if name.startswith(prefixes)), "other")


def fit(args) -> None:
    import numpy as np

    by_size: dict[int, list[dict]] = {}
    for path in args.results:
        r = json.loads(Path(path).read_text()) | {"source": path}
        by_size.setdefault(r["num_docs"], []).append(r)
    runs = [joined(parts) for _, parts in sorted(by_size.items())]
    groups = [g for g, _ in GROUPS] + ["other"]
    table = []
    for r in runs:
        per = dict.fromkeys(groups, 0.0)
        for ph in r["phases"]:
            per[group_of(ph["name"])] += ph["seconds"]
        per["test"] += r["test_s"]
        per["other"] += r["wall_s"] - sum(per.values())  # between phases: start-up, the trainer's set-up
        table.append({"num_docs": r["num_docs"], "wall_s": r["wall_s"], "max_rss_gib": r["max_rss_gib"],
                      "peak_pss_gib": r["peak_pss_gib"],
                      "seconds": {g: round(s, 1) for g, s in per.items()}, "source": r["source"]})
    docs = np.array([t["num_docs"] for t in table], dtype=float)

    def line(y: np.ndarray) -> dict:
        slope, intercept = np.polyfit(docs, y, 1) if len(docs) > 1 else (y[0] / docs[0], 0.0)
        resid = np.abs(slope * docs + intercept - y) / np.maximum(y, 1e-9)
        return {"per_million_docs": round(float(slope) * 1e6, 3), "intercept": round(float(intercept), 2),
                "max_relative_residual": round(float(resid.max()), 3)}

    fits = {g: line(np.array([t["seconds"][g] for t in table])) for g in groups
            if any(t["seconds"][g] for t in table)}
    fits["wall_s"] = line(np.array([t["wall_s"] for t in table]))
    for key in ("max_rss_gib", "peak_pss_gib"):  # a run known from its log alone has no PSS samples
        if all(t[key] is not None for t in table):
            fits[key] = line(np.array([t[key] for t in table]))
    Path(args.json).write_text(json.dumps({"runs": table, "fits": fits}, indent=1) + "\n")
    print(json.dumps(fits, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    bottom = np.zeros(len(table))
    millions = docs / 1e6
    width = 0.12 * (millions.max() if len(millions) else 1)
    for g in (g for g in groups if g in fits):
        minutes = np.array([t["seconds"][g] for t in table]) / 60
        ax_t.bar(millions, minutes, width, bottom=bottom, label=g)
        bottom += minutes
    ax_t.set(xlabel="documents (millions)", ylabel="minutes", title="wall time by phase")
    ax_t.legend(fontsize=7)
    for key, style, label in (("max_rss_gib", "o-", "peak RSS (largest process)"),
                              ("peak_pss_gib", "s--", "peak PSS (all processes)")):
        ax_m.plot(millions, [np.nan if t[key] is None else t[key] for t in table], style, label=label)
    ax_m.set(xlabel="documents (millions)", ylabel="GiB", title="memory of the run")
    ax_m.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("run", help="run a command and record its cost")
    r.add_argument("--json", required=True)
    r.add_argument("--every", type=int, default=10, help="keep every n-th memory sample in the JSON's timeline")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    lg = sub.add_parser("log", help="a run JSON from a stamped log alone")
    lg.add_argument("log")
    lg.add_argument("--json", required=True)
    f = sub.add_parser("fit", help="fit and draw run JSONs at several corpus sizes")
    f.add_argument("results", nargs="+")
    f.add_argument("--json", required=True)
    f.add_argument("--plot", required=True)
    args = p.parse_args()
    {"run": run, "log": from_log, "fit": fit}[args.mode](args)


if __name__ == "__main__":
    main()
