"""How much of a new query set's candidate words the word store already holds (``reformulate --queries`` keeps
candidate words' vectors across runs, in the embedding cache's ``words/``): the store emptied, one split's queries
rewritten (filling it), then another split's; the second split's words encoded afresh are the words the store
gained, out of the words it holds after the second split rewritten alone (the store emptied again).

    python benchmarks/word_store_overlap.py --policy general-joint --data-dir ../shared/datasets/scifact \\
        --first train --second test
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="general-joint")
    ap.add_argument("--data-dir", default="../shared/datasets/scifact")
    ap.add_argument("--first", default="train")
    ap.add_argument("--second", default="test")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    from adaptive_ir.inference.memo import MemoEmbedder
    from adaptive_ir.inference.reformulate import Reformulator

    torch.set_num_threads(args.threads)
    ref = Reformulator.from_pretrained(args.policy, args.data_dir, device="cpu")
    store = ref.ws.emb_cache.words_folder
    first, second = ref.split_queries(args.first), ref.split_queries(args.second)

    def stored_after(*query_sets) -> int:
        for queries in query_sets:
            list(ref.reformulate_file(queries, batch_size=4096))
        return MemoEmbedder(ref.ws.embedder, store=store).stored  # read and checked as a run reads it

    shutil.rmtree(store, ignore_errors=True)
    alone = stored_after(second)
    shutil.rmtree(store, ignore_errors=True)
    after_first = stored_after(first)
    after_both = stored_after(second)
    new = after_both - after_first
    print(json.dumps({"first": [args.first, len(first)], "second": [args.second, len(second)],
                      "second_words": alone, "stored_by_first": after_first, "second_words_encoded": new,
                      "second_words_found_stored": round(1 - new / max(alone, 1), 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
