"""A MARCO-size collection built offline: WikiCAR's real paragraphs, queries and judgments, grown with generated
distractor paragraphs to the size asked for (``adaptive_ir.data.synthetic.grow_beir``). A scale test, not a new
benchmark: the folder's README.md says so.

    python benchmarks/make_large.py <wikicar folder> <out> --num-docs 8800000 [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import time

from adaptive_ir.data.synthetic import grow_beir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="a BEIR folder (WikiCAR: ../shared/datasets/wikicar/build.py makes it)")
    p.add_argument("out", help="the folder to write")
    p.add_argument("--num-docs", type=int, required=True, help="documents in all, real ones included")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    start = time.perf_counter()
    settings = grow_beir(args.source, args.out, args.num_docs, args.seed)
    print(json.dumps({**settings, "seconds": round(time.perf_counter() - start, 1)}))


if __name__ == "__main__":
    main()
