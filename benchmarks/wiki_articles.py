"""A 258k-article Wikipedia collection for timing whole commands at scale: WikiCAR's source, one document per article.

    python benchmarks/wiki_articles.py <PatchedDistro snapshot> <out>

The same 258,288 articles WikiCAR is cut from (``../shared/datasets/wikicar/build.py``, whose parsing this reuses),
each a document (title + body); the queries are WikiCAR's ("<title> <section heading>") of the dev and test
articles, and a query's one relevant document is its article. A BEIR folder (corpus.jsonl.gz, queries.jsonl,
qrels/{dev,test}.tsv). A scale test for ``evaluate --baselines``, not a benchmark of effectiveness.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib.util
import json
from pathlib import Path

BUILD = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "wikicar" / "build.py"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("snapshot", help="the folder `fetch github:ZhouYii/PatchedDistro` names")
    p.add_argument("out")
    p.add_argument("--build", default=str(BUILD), help="WikiCAR's build.py")
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("wikicar_build", args.build)
    assert spec is not None and spec.loader is not None
    wb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wb)
    out = Path(args.out)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    queries: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
    with gzip.open(out / "corpus.jsonl.gz", "wt", encoding="utf-8", compresslevel=6) as corpus:
        for did, title, body in wb.articles(args.snapshot):
            corpus.write(json.dumps({"_id": f"a{did}", "title": title.strip(), "text": body}, ensure_ascii=False)
                         + "\n")
            bucket = int(wb.h("split:" + did, 8), 16) % 1000
            if bucket >= 30:
                continue
            lines = [x.strip() for x in body.split("\n") if x.strip()]
            headings = dict.fromkeys(x[:-1].strip() for i, x in enumerate(lines)
                                     if wb.is_heading(x) and i + 1 < len(lines) and not wb.is_heading(lines[i + 1]))
            for heading in headings:
                if heading.lower() not in wb.SKIP:
                    queries["test" if bucket < 15 else "dev"].append(
                        ("q" + wb.h(f"{did}:{heading}", 12), f"{title.strip()} {heading}", f"a{did}"))
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for qid, text, _ in sorted(q for qs in queries.values() for q in qs):
            f.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    for split, qs in queries.items():
        with open(out / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            f.writelines(f"{qid}\t{doc}\t1\n" for qid, _, doc in sorted(qs))
    print(f"{out}: {', '.join(f'{len(qs)} {s}' for s, qs in sorted(queries.items()))} queries")


if __name__ == "__main__":
    main()
