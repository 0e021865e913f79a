"""What a command takes from the machine, all its processes together: the peak of their summed PSS (each shared
page divided among the processes that map it; RSS counts it once per process) and the summed RSS at that moment,
sampled every 0.5 s from ``/proc/<pid>/smaps_rollup`` (Linux); and the same for the ranks alone (the processes whose
environment holds ``LOCAL_RANK``, as torchrun starts its workers; the command's own process when none does): what
the issue's "the ranks' summed PSS" measures, without torchrun's launcher. For one rank against two DDP ranks:

    python benchmarks/process_memory.py --json one.json -- adaptive-ir train --config wikicar-anserini \
        --data-dir <wikicar> --output-dir runs/one --set embeddings.cache_dir=<warm cache> --epochs 1 --no-progress
    python benchmarks/process_memory.py --json two.json -- torchrun --nproc_per_node=2 train_optimized.py \
        --config wikicar-anserini --data-dir <wikicar> --output-dir runs/two --set embeddings.cache_dir=<warm cache> \
        --epochs 1 --no-progress
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path


def family(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return out


def pss_rss_kib(pids: list[int]) -> tuple[int, int]:
    pss = rss = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:  # a process that ended between the listing and the read
            pass
    return pss, rss


def ranks(pids: list[int]) -> list[int]:
    """The processes of ``pids`` that torchrun started as ranks (``LOCAL_RANK`` in their environment); the first
    (the command itself) when there are none."""
    found = []
    for p in pids:
        try:
            if b"\0LOCAL_RANK=" in b"\0" + Path(f"/proc/{p}/environ").read_bytes():
                found.append(p)
        except OSError:
            pass
    return found or pids[:1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="where the peaks go")
    p.add_argument("--log", help="the command's output (default: beside --json, .log)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    log = Path(args.log or Path(args.json).with_suffix(".log"))
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        peak = {"pss_gib": 0.0, "rss_sum_gib": 0.0, "processes": 0}
        peak_ranks = {"ranks_pss_gib": 0.0, "ranks": 0}
        while proc.poll() is None:
            pids = family(proc.pid)
            pss, rss = pss_rss_kib(pids)
            if pss / 2 ** 20 > peak["pss_gib"]:
                peak = {"pss_gib": round(pss / 2 ** 20, 3), "rss_sum_gib": round(rss / 2 ** 20, 3),
                        "processes": len(pids)}
            workers = ranks(pids)
            pss = pss_rss_kib(workers)[0]
            if pss / 2 ** 20 > peak_ranks["ranks_pss_gib"]:
                peak_ranks = {"ranks_pss_gib": round(pss / 2 ** 20, 3), "ranks": len(workers)}
            time.sleep(0.5)
    result = {**peak, **peak_ranks, "exit_status": proc.returncode, "wall_s": round(time.time() - start, 1),
              "command": " ".join(command)}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
