"""Command line: ``adaptive-ir {train,evaluate,compare,reformulate,oracle,export}``; ``train_optimized.py`` wraps
``train``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, cast

from adaptive_ir.config.stages import FIRST_STAGES, STAGE_DESCRIPTIONS

DESCRIPTION = ("Train, evaluate and apply query-reformulation agents: adaptive-ir COMMAND --help tells more. "
               "train_optimized.py runs 'adaptive-ir train'.")
"""What ``adaptive-ir --help`` says (plain text: argparse prints it as it is)."""

OOM_ADVICE = ("CUDA out of memory. Lower training.collect_batch_size (episodes per forward) and "
              "training.batch_size (PPO minibatch), then keep AMP on (training.use_amp: true).")


def _common(p: argparse.ArgumentParser, seed: bool = True, auto_stage: bool = False) -> None:
    p.add_argument("--config", default="quickstart",
                   help="YAML file, or a name in configs/ (quickstart, scifact, msa_optimized_gpu, ...)")
    p.add_argument("--data-dir", help="override data.data_dir")
    p.add_argument("--output-dir", help="override training.output_dir")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N | mps (override system.device)")
    if seed:
        p.add_argument("--seed", type=int, help="override system.seed")
    _first_stage(p, auto_stage)
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override any config key (repeatable)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _first_stage(p: argparse.ArgumentParser, auto: bool = False) -> None:
    p.add_argument("--first-stage", choices=[*FIRST_STAGES, *(["auto"] if auto else [])],
                   help="index and BM25 to run over: " + "; ".join(f"{name}, {text}" for name, text in
                                                                   STAGE_DESCRIPTIONS.items())
                   + "; sets the retrieval keys (--set wins)"
                   + ("; auto: the one where the policy has the higher dev R@40 on this collection (said on "
                      "the first line; without dev queries, the policy's own)" if auto else ""))


def build_parser() -> argparse.ArgumentParser:
    from adaptive_ir import __version__

    ap = argparse.ArgumentParser(prog="adaptive-ir", description=DESCRIPTION)
    ap.add_argument("--version", action="version", version=f"adaptive-ir {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a reformulation agent with PPO")
    _common(t)
    t.add_argument("--epochs", type=int, help="override training.num_epochs")
    t.add_argument("--batch-size", type=int, help="override training.batch_size (PPO minibatch)")
    t.add_argument("--collect-batch-size", type=int, help="override training.collect_batch_size (B)")
    t.add_argument("--no-amp", action="store_true", help="disable mixed precision (debugging)")
    t.add_argument("--checkpoint", help="resume from this checkpoint (in this run's folder: that run goes on; "
                   "from elsewhere: a new run starts from it)")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in the output folder from its checkpoints/last.pt")
    t.add_argument("--overwrite", action="store_true",
                   help="start over in an output folder that holds a run: the old run is moved aside to "
                        "<folder>.replaced-<time>, not deleted")
    t.add_argument("--test", action="store_true", help="after training, evaluate the best checkpoint on test")

    e = sub.add_parser("evaluate", help="evaluate BM25 / RM3 baselines and optionally a trained agent")
    _common(e, auto_stage=True)
    e.add_argument("--checkpoint", help="also evaluate this agent checkpoint")
    e.add_argument("--policy", help="evaluate a trained policy on a collection it may never have seen, with no "
                   "training: a shipped policy's name (nfcorpus-seed-1, ...), an exported policy folder or a "
                   "checkpoint; its own config indexes, mines and embeds the --data-dir collection (a BEIR folder; "
                   "none: the embedded one), cached under runs/pretrained/<collection>")
    e.set_defaults(config=None)  # none: the checkpoint's own config, else quickstart
    e.add_argument("--baselines", action="store_true", help="include BM25 and RM3")
    e.add_argument("--oracle", action="store_true",
                   help="include the qrels oracle (greedy best-term selection over the same candidates)")
    e.add_argument("--split", default="test")
    e.add_argument("--json", help="write {method: {metric: value}} here (with --baselines and a policy, the "
                   "queries it helps and hurts against each baseline beside it: <name>.risk.json)")
    e.add_argument("--markdown", help="write the table here")
    e.add_argument("--run-dir", help="write TREC run files here")

    c = sub.add_parser("compare", help="train one run per seed and compare every method on a split: mean ± std "
                       "over seeds, paired per-query tests of the agent against BM25 and the best fixed rule")
    _common(c, seed=False)
    c.add_argument("--seeds", default="1,2,3", help="training seeds, comma-separated (default 1,2,3)")
    c.add_argument("--split", default="test",
                   help="split to compare on (default test); dev never opens the test judgments")
    c.add_argument("--skip-train", action="store_true",
                   help="evaluate the seeds' existing best.pt under --output-dir instead of training")
    c.add_argument("--permutations", type=int, default=10_000,
                   help="random sign assignments of the randomization test (default 10000)")

    o = sub.add_parser("oracle", help="the qrels oracle: greedy best-term selection, with BM25 and RM3")
    _common(o)
    o.add_argument("--split", default="test")
    o.add_argument("--json", help="write {method: {metric: value}} here")

    r = sub.add_parser("reformulate", help="rewrite queries with a trained agent: texts given here, a file of "
                       "queries or a collection's split")
    r.add_argument("queries", nargs="*", help="query texts (or --queries FILE, or --split)")
    which = r.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a trained checkpoint (over the collection it was trained on)")
    which.add_argument("--policy", help="a shipped policy's name, an exported policy folder or a checkpoint, "
                       "applied to the --data-dir collection (a BEIR folder; none: the embedded one)")
    r.add_argument("--data-dir", help="collection folder: with --checkpoint, if it moved since training")
    r.add_argument("--device", default="auto")
    r.add_argument("--queries", metavar="FILE", dest="queries_file",
                   help="a file of queries: a BEIR queries.jsonl, TREC topics, id<TAB>text lines or one query per "
                        "line (ids: line numbers), plain or .gz; - reads standard input. Read and written in "
                        "batches: any number of queries in constant memory")
    r.add_argument("--queries-format", choices=("auto", "jsonl", "trec", "tsv", "lines"), default="auto",
                   help="how to read --queries (default auto: by the name, else the first line)")
    r.add_argument("--split", help="rewrite the queries of this split of the collection (train, dev, test)")
    r.add_argument("--output", metavar="FILE",
                   help="write one JSON object per query here (id, text, added terms with weights, the Lucene "
                        "query, an Elasticsearch body, top documents with --top-docs), under a temporary name "
                        "renamed when complete")
    r.add_argument("--field", default="contents", help="the field of the Elasticsearch / OpenSearch body "
                   "(default contents)")
    r.add_argument("--clause", choices=("match", "term"), default="match",
                   help="Elasticsearch clause per term: match (analyzed by the field's analyzer; default) or term")
    r.add_argument("--top-docs", type=int, default=None,
                   help="top documents per query (default 10 for queries given here, none for --queries / --split: "
                        "the search is then skipped)")
    r.add_argument("--batch-size", type=int, default=1024, help="queries per batch with --queries / --split")
    r.add_argument("--format", choices=("text", "json", "lucene"), default="text",
                   help="stdout: text (default); json; lucene: one weighted query per line in Lucene query syntax "
                        "(term^0.5), for Anserini / Pyserini / Elasticsearch. With --queries / --split: json "
                        "prints one record per line, lucene prints id<TAB>query (Anserini's topics format)")
    r.add_argument("--json", action="store_true", help="same as --format json")
    _first_stage(r)
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="with --policy: override a key of the policy's config (repeatable)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--debug", action="store_true")

    x = sub.add_parser("export", help="write a checkpoint's policy as policy.safetensors + policy.json (its spec) "
                       "+ README.md (model card)")
    x.add_argument("--checkpoint", required=True, help="a checkpoint; or an exported policy (folder or shipped "
                   "name), written again with the --apply settings given instead of its own")
    x.add_argument("--output-dir", required=True, help="folder to write the three files into")
    x.add_argument("--data-dir", help="the collection, for a checkpoint written before specs were recorded")
    x.add_argument("--apply", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="a setting the policy is applied with on a collection (evaluate/reformulate --policy, "
                   "Reformulator.from_pretrained), over its training config; repeatable")
    x.add_argument("--debug", action="store_true")
    return ap


def _settings(items: list[str], flag: str = "--set") -> dict[str, str]:
    """SECTION.KEY=VALUE items (of ``flag``) as a dict."""
    o: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            from adaptive_ir.common.errors import ConfigError
            raise ConfigError(f"{flag} {item}: expected SECTION.KEY=VALUE")
        k, v = item.split("=", 1)
        o[k.strip()] = v
    return o


def config_overrides(args) -> dict[str, str]:
    """The dotted config keys a command line sets: ``--set`` items, ``--first-stage``'s keys under them, and the
    flags that name one key each (``--data-dir``, ``--seed``, ...)."""
    o = _settings(args.set)
    stage = getattr(args, "first_stage", None)
    if stage is not None:  # the stage's keys, under whatever --set names (values as YAML reads them back)
        from adaptive_ir.config import stage_settings

        o = {**{key: json.dumps(v) if isinstance(v, bool) else str(v) for key, v in stage_settings(stage).items()},
             **o}
    for flag, key in (("data_dir", "data.data_dir"), ("output_dir", "training.output_dir"),
                      ("device", "system.device"), ("seed", "system.seed"), ("epochs", "training.num_epochs"),
                      ("batch_size", "training.batch_size"), ("collect_batch_size", "training.collect_batch_size")):
        val = getattr(args, flag, None)
        if val is not None:
            o[key] = str(val)
    if getattr(args, "no_amp", False):
        o["training.use_amp"] = "false"
    return o


def _init_distributed() -> str | None:
    """Under torchrun (WORLD_SIZE > 1) join the process group, nccl on CUDA and gloo on the CPU, and return this
    process's device (cuda:LOCAL_RANK, or cpu); None for an ordinary single-process run."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = "cpu"
        dist.init_process_group("gloo")
    return device


def cmd_train(args) -> int:
    import torch.distributed as dist

    from adaptive_ir.config import load_config
    from adaptive_ir.evaluation.metrics import format_table
    from adaptive_ir.training.run import RefusedOnRankZero, names_folders, run_training

    overrides = config_overrides(args)
    device = _init_distributed()
    if device is not None:
        overrides["system.device"] = device
    try:
        cfg = load_config(args.config, overrides)
        trained = run_training(cfg, resume=args.resume, checkpoint=args.checkpoint, overwrite=args.overwrite,
                               numbered=not names_folders(overrides), progress=not args.no_progress, test=args.test,
                               announce=lambda note: print(note, flush=True))
        if device is not None:
            # every rank done (rank 0 writes its run record last) before any tears the group down: gloo aborts a
            # rank whose peer is still connected when it exits ("terminate called without an active exception")
            dist.barrier()
    except RefusedOnRankZero:  # rank 0 prints why
        return 2
    finally:
        if device is not None:
            dist.destroy_process_group()
    if trained.run is None:  # a DDP rank other than 0: rank 0 reports
        return 0
    cfg, result = trained.cfg, trained.result
    print(f"trained {result['updates']} updates; best dev {result['best_dev']:.4f} at update "
          f"{result['best_update']}; checkpoints in {cfg.training.checkpoint_path_dir}")
    if result["interrupted"]:
        print(f"interrupted: resume with --checkpoint {cfg.training.checkpoint_path_dir / 'last.pt'}")
        return trained.exit_code
    if trained.test is not None:
        print(format_table(trained.test, f"{trained.trainer.ws.collection.name} / test"))
        print(f"wrote {Path(cfg.training.output_dir) / 'test_metrics.json'}")
    print(f"run {trained.run.record['id']} completed: results in {cfg.training.output_dir} "
          "(run.json says what produced them)")
    return 0


def cmd_evaluate(args) -> int:
    from adaptive_ir.api import checkpoint_config, choose_first_stage, evaluate_config
    from adaptive_ir.artifacts.checkpoint import SavedPolicy, pretrained_config
    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.config import load_config

    source = None if args.checkpoint is None else SavedPolicy.read(args.checkpoint)
    portable = args.policy is not None
    auto = args.first_stage == "auto"
    if auto:
        if args.checkpoint is None and args.policy is None:
            raise ConfigError("--first-stage auto chooses the stage a policy runs best over: give --policy or "
                              "--checkpoint")
        args.first_stage = None
    if portable:
        if args.checkpoint is not None or args.config is not None:
            raise ConfigError(f"--policy {args.policy}: goes alone (its own config says how to index, mine and embed "
                              "the collection); drop --checkpoint / --config, and use --set to change a setting")
        overrides = config_overrides(args)
        cfg, source = pretrained_config(args.policy, overrides.pop("data.data_dir", None), overrides)
    elif args.config is None and source is not None:
        cfg = checkpoint_config(source, config_overrides(args))  # the config it was trained with
    else:
        cfg = load_config(args.config or "quickstart", config_overrides(args))
    if auto:
        assert source is not None  # a policy or a checkpoint, checked above
        cfg, note = choose_first_stage(cfg, source, not args.no_progress, portable)
        print(note, flush=True)
    risk: dict = {}
    results, name, origin = evaluate_config(cfg, source, args.split, args.baselines, args.oracle, args.run_dir,
                                            not args.no_progress, portable=portable, risk=risk)
    if origin:
        print(origin, flush=True)
    _report(results, f"{name} / {args.split}", args.json, args.markdown, risk)
    return 0


def _report(results: dict[str, dict[str, float]], title: str, json_path: str | None, markdown: str | None,
            risk: dict | None = None) -> None:
    """Print the table of ``results`` (and of the agent's ``risk`` against the baselines, when there is one);
    write them as JSON (the risk beside it, ``<name>.risk.json``) and the tables as Markdown where asked."""
    from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json
    from adaptive_ir.evaluation.metrics import format_table
    from adaptive_ir.evaluation.risk import format_risk

    table = format_table(results, title)
    if risk:
        table += "\n\n" + format_risk(risk, title=f"{title}: queries the agent helps and hurts")
    print(table)
    if json_path:
        atomic_write_json(json_path, results)
        if risk:
            atomic_write_json(Path(json_path).with_suffix(".risk.json"), risk)
    if markdown:
        atomic_write_bytes(markdown, (table + "\n").encode("utf-8"))


def cmd_compare(args) -> int:
    import signal

    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.compare import CompareInterrupted, compare, parse_seeds
    from adaptive_ir.config import load_config

    seeds = parse_seeds(args.seeds)
    if args.permutations < 1:
        raise ConfigError(f"--permutations {args.permutations}: expected a positive number, e.g. 10000")
    cfg = load_config(args.config, config_overrides(args))
    try:
        report, table = compare(cfg, seeds, args.split, skip_train=args.skip_train, progress=not args.no_progress,
                                n_permutations=args.permutations)
    except CompareInterrupted as e:
        print(f"interrupted while training seed {e.seed}: run the same command again to resume", file=sys.stderr)
        return 130 if e.signal == signal.SIGINT else 0
    print(table)
    out = Path(cfg.training.output_dir)
    print(f"wrote {out / f'compare-{args.split}.md'} and .json; TREC runs under {out}")
    return 0


def cmd_reformulate(args) -> int:
    import itertools

    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.inference.queries import as_queries
    from adaptive_ir.inference.reformulate import Reformulator

    fmt = "json" if args.json else args.format
    if args.checkpoint and (args.set or args.first_stage):
        raise ConfigError("--set and --first-stage go with --policy: a checkpoint is reformulated with the config "
                          "it was trained with")
    sources = [flag for flag, given in (("query texts", args.queries), ("--queries", args.queries_file),
                                        ("--split", args.split)) if given]
    if len(sources) != 1:
        raise ConfigError("reformulate: give the queries one way: query texts, --queries FILE (- for stdin) or "
                          f"--split NAME ({'got ' + ' and '.join(sources) if sources else 'none given'})")
    if args.top_docs is not None and args.top_docs < 0:
        raise ConfigError(f"--top-docs {args.top_docs}: expected 0 or more")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size {args.batch_size}: expected a positive number")
    if args.output and args.queries:
        raise ConfigError("--output goes with --queries FILE or --split")
    queries = None
    if args.queries_file:  # read the first query now: a bad file is reported before the policy loads
        queries = as_queries(args.queries_file, args.queries_format)
        queries = itertools.chain([next(queries)], queries)
    ref = (Reformulator.load(args.checkpoint, device=args.device, data_dir=args.data_dir) if args.checkpoint else
           Reformulator.from_pretrained(args.policy, args.data_dir, device=args.device,
                                        # dotted --set settings, not from_pretrained's own parameters (progress)
                                        **cast("dict[str, Any]", {k: v for k, v in config_overrides(args).items()
                                                                  if k not in ("data.data_dir", "system.device")})))
    # stdout stays pure JSON / queries with --format json / lucene: the checkpoint's origin then goes to stderr
    print(ref.origin, file=sys.stderr if fmt != "text" or args.output else sys.stdout, flush=True)
    if not args.queries:
        return _reformulate_set(ref, args, fmt, queries)
    results = ref.reformulate(args.queries, top_docs=10 if args.top_docs is None else args.top_docs)
    if fmt == "json":
        print(json.dumps(results, indent=1))
        return 0
    if fmt == "lucene":
        for r in results:
            print(r["lucene_query"])
        return 0
    for r in results:
        print(f"query:     {r['text']}")
        if r["start_terms"]:
            print(f"start:     the query + RM3's {', '.join(t['term'] for t in r['start_terms'])}")
        print(f"added:     {', '.join(t['term'] for t in r['added_terms']) or '(none: STOP)'}")
        print(f"rewritten: {r['rewritten']}")
        for rank, doc in enumerate(r.get("top_docs", []), 1):
            print(f"  {rank:3d}. {doc['id']}  {doc['score']:.4f}")
    return 0


def _reformulate_set(ref, args, fmt: str, queries) -> int:
    """``reformulate --queries FILE`` / ``--split NAME``: records streamed to ``--output`` (JSON lines, renamed
    into place when complete) or to stdout in ``fmt``."""
    total = None
    if queries is None:
        queries = ref.split_queries(args.split)
        total = len(queries)
    records = ref.reformulate_file(queries, top_docs=args.top_docs or 0, field=args.field, clause=args.clause,
                                   batch_size=args.batch_size, progress=not args.no_progress, total=total)
    if args.output:
        from adaptive_ir.inference.records import write_jsonl

        n = write_jsonl(args.output, records)
        print(f"wrote {n} rewrites to {args.output}", file=sys.stderr)
        return 0
    for r in records:
        if fmt == "json":
            print(json.dumps(r, ensure_ascii=False))
        elif fmt == "lucene":
            print(f"{r['id']}\t{r['lucene_query']}")
        else:
            print(f"id:        {r['id']}")
            print(f"query:     {r['text']}")
            if r["start_terms"]:
                print(f"start:     the query + {', '.join(t['term'] for t in r['start_terms'])}")
            added = ", ".join(f"{t['term']}^{t['weight']:.4g}" for t in r["added_terms"])
            print(f"added:     {added or '(none: STOP)'}")
            print(f"rewritten: {r['rewritten']}")
            for rank, d in enumerate(r.get("top_docs", []), 1):
                print(f"  {rank:3d}. {d['id']}  {d['score']:.4f}")
    return 0


def cmd_export(args) -> int:
    from adaptive_ir.api import export

    folder = export(args.checkpoint, args.output_dir, args.data_dir, _settings(args.apply, "--apply"))
    print(f"wrote {folder}/policy.safetensors, policy.json and README.md")
    return 0


def cmd_oracle(args) -> int:
    from adaptive_ir.api import evaluate_config
    from adaptive_ir.config import load_config

    cfg = load_config(args.config, config_overrides(args))
    results, name, _ = evaluate_config(cfg, None, args.split, True, True, None, not args.no_progress)
    _report(results, f"{name} / {args.split}", args.json, None)
    return 0


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "compare": cmd_compare, "reformulate": cmd_reformulate,
            "oracle": cmd_oracle, "export": cmd_export}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import bm25s  # noqa: F401 - imported first: it sets its own logger level on import

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    from adaptive_ir.common.errors import AdaptiveIRError

    try:
        return COMMANDS[args.command](args)
    except AdaptiveIRError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # CUDA OOM is a RuntimeError subclass; give the seed's advice, not a traceback
        import torch
        if isinstance(e, torch.cuda.OutOfMemoryError) and not args.debug:
            print(f"error: {OOM_ADVICE}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
