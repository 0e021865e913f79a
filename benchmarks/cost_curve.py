"""How the index build grows with the corpus: ``index_build.py``'s results at several sizes, a least-squares line
per first stage for time and peak RSS against postings, the bytes per posting of each big array, and a picture.

    python benchmarks/cost_curve.py benchmarks/results/index_build.json benchmarks/results/index_build_large3m.json \
        benchmarks/results/index_build_large8m.json --json benchmarks/results/cost_curve_index.json \
        --plot docs/cost_curve_index.png

The sizes come from ``make_large.py`` (WikiCAR grown with distractor paragraphs); the bytes per posting are those of
the arrays an index keeps on disk (and maps), read off the code's dtypes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ARRAY_BYTES = {"index data (float32 impact)": 4, "index indices (int32 document)": 4,
               "corpus terms (int32 term)": 4, "corpus tf (uint16)": 2, "corpus first positions (uint16)": 2}
"""Bytes per posting of each big array (uint16 arrays widen to uint32 past 65,535)."""
ARRAY_BYTES_PER_DOC = {"index doc_len (float32)": 4, "corpus indptr (int64)": 8, "document ids (offsets)": 8}


def fit(x: np.ndarray, y: np.ndarray) -> dict:
    slope, intercept = np.polyfit(x, y, 1)
    return {"slope": float(slope), "intercept": float(intercept),
            "max_relative_residual": float(np.max(np.abs(slope * x + intercept - y) / y))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="index_build.py JSON files, one per corpus size")
    p.add_argument("--json", required=True)
    p.add_argument("--plot", required=True)
    args = p.parse_args()
    rows = [dict(s, source=path) for path in args.results for s in json.loads(Path(path).read_text())["stages"]]
    out: dict = {"points": [{k: r[k] for k in ("stage", "num_docs", "postings", "build_s", "peak_rss_gib",
                                               "docs_per_s", "source")} for r in rows],
                 "bytes_per_posting": ARRAY_BYTES, "bytes_per_posting_total": sum(ARRAY_BYTES.values()),
                 "bytes_per_document": ARRAY_BYTES_PER_DOC, "fits": {}}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for stage in sorted({r["stage"] for r in rows}):
        pts = sorted((r for r in rows if r["stage"] == stage), key=lambda r: r["postings"])
        x = np.array([r["postings"] for r in pts], dtype=float)
        t = np.array([r["build_s"] for r in pts])
        m = np.array([r["peak_rss_gib"] for r in pts])
        time_fit, memory_fit = fit(x, t), fit(x, m)
        out["fits"][stage] = {"build_ns_per_posting": time_fit["slope"] * 1e9, "build_s_at_0": time_fit["intercept"],
                              "build_max_relative_residual": time_fit["max_relative_residual"],
                              "peak_bytes_per_posting": memory_fit["slope"] * 2 ** 30,
                              "peak_gib_at_0": memory_fit["intercept"],
                              "peak_max_relative_residual": memory_fit["max_relative_residual"]}
        for ax, y, f in ((ax_t, t, time_fit), (ax_m, m, memory_fit)):
            (dots,) = ax.plot(x / 1e6, y, "o", label=stage)
            ax.plot(x / 1e6, f["slope"] * x + f["intercept"], "-", alpha=0.5, color=dots.get_color())
    ax_t.set(xlabel="postings (millions)", ylabel="index build (s)", title="build time")
    ax_m.set(xlabel="postings (millions)", ylabel="peak RSS (GiB)", title="build peak RSS")
    for ax in (ax_t, ax_m):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle("Index build against corpus size (WikiCAR grown to 3M and 8.8M documents), 2 CPU cores")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["fits"], indent=1))


if __name__ == "__main__":
    main()
