"""The whole ``adaptive-ir evaluate --baselines`` on a large collection, from empty caches: wall time, peak RSS and
each phase, as a new user runs it (the field's rows over both first stages, on the split and on dev).

    python benchmarks/evaluate_baselines.py --data-dir <folder> --label after \
        --json benchmarks/results/evaluate_baselines_wiki_articles.json

The command runs in a process of its own under ``/usr/bin/time -v`` (its peak RSS is the command's own: its largest
process's), in a fresh temporary folder, and the summed PSS of its process tree (the index's worker processes
included, their pages shared with their parent counted once) is sampled every 0.5 s; ``--label`` names the entry written into ``--json`` (other labels there are kept, so before and
after sit side by side). Run it with another checkout on ``PYTHONPATH`` for a before/after on the same machine.
The collection of the README's figure: ``benchmarks/wiki_articles.py`` (258,288 Wikipedia articles).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from process_memory import family, pss_rss_kib
from run_cost import PHASE, seconds_of

COMMAND = ["evaluate", "--config", "cranfield", "--set", "candidate_mining.feedback=bm25", "--set",
           "candidate_mining.stem_variants=false", "--baselines", "--no-progress"]
"""The issue's command: Cranfield's config (the engine's default first stage) on the large collection."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="a BEIR folder (benchmarks/wiki_articles.py makes the large one)")
    p.add_argument("--label", required=True, help="the entry's name in --json (e.g. before, after)")
    p.add_argument("--json", required=True, help="results file; entries of other labels are kept")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="adaptive-ir-evaluate-") as work:
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "adaptive_ir.cli", *COMMAND, "--data-dir",
               str(Path(args.data_dir).resolve()), "--set", f"training.output_dir={work}/runs/x"]
        proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        peak_pss = [0]

        def sample() -> None:
            while proc.poll() is None:
                peak_pss[0] = max(peak_pss[0], pss_rss_kib(family(proc.pid))[0])
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        log, _ = proc.communicate()
        sampler.join()
    if proc.returncode != 0:
        sys.exit(f"the command failed ({proc.returncode}):\n{log[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([0-9.]+)", log)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)
    assert wall and rss, "no /usr/bin/time -v report"
    entry = {"wall_s": round(int(wall[1] or 0) * 3600 + int(wall[2]) * 60 + float(wall[3]), 1),
             "peak_rss_gib": round(int(rss[1]) / 2 ** 20, 2),
             "peak_pss_gib_all_processes": round(peak_pss[0] / 2 ** 20, 2),
             "phases": [{"phase": m[1], "seconds": seconds_of(m[2]), "peak_rss_gib_so_far": float(m[3])}
                        for m in PHASE.finditer(log)],
             "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
             "pythonpath": os.environ.get("PYTHONPATH")}
    out = Path(args.json)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results["command"] = "adaptive-ir " + " ".join(COMMAND[:-1]) + " --data-dir <folder>  (from empty caches)"
    results[args.label] = entry
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({args.label: {k: v for k, v in entry.items() if k != "phases"}}))


if __name__ == "__main__":
    main()
