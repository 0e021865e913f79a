"""Command line: ``adaptive-ir {train,evaluate,compare,reformulate,oracle,export}``; ``train_optimized.py`` wraps
``train``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

OOM_ADVICE = ("CUDA out of memory. Lower training.collect_batch_size (episodes per forward) and "
              "training.batch_size (PPO minibatch), then keep AMP on (training.use_amp: true).")


def _common(p: argparse.ArgumentParser, seed: bool = True) -> None:
    p.add_argument("--config", default="quickstart",
                   help="YAML file, or a name in configs/ (quickstart, scifact, msa_optimized_gpu, ...)")
    p.add_argument("--data-dir", help="override data.data_dir")
    p.add_argument("--output-dir", help="override training.output_dir")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N | mps (override system.device)")
    if seed:
        p.add_argument("--seed", type=int, help="override system.seed")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override any config key (repeatable)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    from adaptive_ir import __version__

    ap = argparse.ArgumentParser(prog="adaptive-ir", description=__doc__)
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
    _common(e)
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
    e.add_argument("--json", help="write {method: {metric: value}} here")
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

    r = sub.add_parser("reformulate", help="rewrite queries with a trained agent")
    r.add_argument("queries", nargs="+", help="query texts")
    which = r.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a trained checkpoint (over the collection it was trained on)")
    which.add_argument("--policy", help="a shipped policy's name, an exported policy folder or a checkpoint, "
                       "applied to the --data-dir collection (a BEIR folder; none: the embedded one)")
    r.add_argument("--data-dir", help="collection folder: with --checkpoint, if it moved since training")
    r.add_argument("--device", default="auto")
    r.add_argument("--top-docs", type=int, default=10)
    r.add_argument("--format", choices=("text", "json", "lucene"), default="text",
                   help="text (default); json; lucene: one weighted query per line in Lucene query syntax "
                        "(term^0.5), for Anserini / Pyserini / Elasticsearch")
    r.add_argument("--json", action="store_true", help="same as --format json")
    r.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="with --policy: override a key of the policy's config (repeatable)")
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


def _settings(items: list[str], flag: str = "--set") -> dict[str, object]:
    """SECTION.KEY=VALUE items (of ``flag``) as a dict."""
    o: dict[str, object] = {}
    for item in items:
        if "=" not in item:
            from adaptive_ir.common.errors import ConfigError
            raise ConfigError(f"{flag} {item}: expected SECTION.KEY=VALUE")
        k, v = item.split("=", 1)
        o[k.strip()] = v
    return o


def _overrides(args) -> dict[str, object]:
    o = _settings(args.set)
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
    from adaptive_ir.training.trainer import Trainer

    overrides = _overrides(args)
    device = _init_distributed()
    if device is not None:
        overrides["system.device"] = device
    results = run = None
    try:
        cfg = load_config(args.config, overrides)
        claimed = _start_run(cfg, args)
        if claimed is None:  # a DDP rank whose rank 0 was refused: rank 0 printed why
            return 2
        cfg, run, resume_from = claimed
        try:
            trainer = Trainer(cfg, resume=resume_from, progress=not args.no_progress,
                              run=run.identity if run else None)
            result = trainer.train()
            if args.test and trainer.is_main and not result["interrupted"]:
                results = trainer.test()  # rank 0 alone: every rank ends with the same parameters
        except BaseException as e:
            if run is not None:
                run.finish_raised(e)
            raise
    finally:
        if device is not None:
            dist.destroy_process_group()
    if not trainer.is_main:
        return 0
    print(f"trained {result['updates']} updates; best dev {result['best_dev']:.4f} at update "
          f"{result['best_update']}; checkpoints in {cfg.training.checkpoint_path_dir}")
    if result["interrupted"]:
        print(f"interrupted: resume with --checkpoint {cfg.training.checkpoint_path_dir / 'last.pt'}")
        return run.finish_trained(result, trainer.stop_signal)
    if results is not None:
        print(format_table(results, f"{trainer.ws.collection.name} / test"))
        print(f"wrote {Path(cfg.training.output_dir) / 'test_metrics.json'}")
    run.finish_trained(result, trainer.stop_signal)
    print(f"run {run.record['id']} completed: results in {cfg.training.output_dir} "
          "(run.json says what produced them)")
    return 0


def _start_run(cfg, args):
    """Claim the run's folders (rundir.py): (the config with the folders claimed, RunDir, checkpoint to resume
    from). Under torchrun rank 0 claims them and the other ranks take the folders it chose, with RunDir None; they
    get None when rank 0 was refused."""
    import torch.distributed as dist

    from adaptive_ir.common.errors import AdaptiveIRError
    from adaptive_ir.training.rundir import LOCATION_KEYS, start_run

    ddp = dist.is_available() and dist.is_initialized()
    run = failure = None
    if not ddp or dist.get_rank() == 0:
        # folders named on the command line are taken as named; the config's own are numbered when taken
        named = args.output_dir is not None or any(
            item.partition("=")[0].strip() in {f"training.{k}" for k in LOCATION_KEYS} for item in args.set)
        try:
            run = start_run(cfg, resume=args.resume, checkpoint=args.checkpoint, overwrite=args.overwrite,
                            numbered=not named)
        except AdaptiveIRError as e:
            failure = e
    if not ddp:
        if failure is not None:
            raise failure
        print(run.note, flush=True)
        return run.cfg, run, run.resume_from
    shared = [None, None]  # rank 0's folders (None: refused) and checkpoint to resume from
    if run is not None:
        shared = [{k: getattr(run.cfg.training, k) for k in LOCATION_KEYS}, run.resume_from]
    dist.broadcast_object_list(shared, src=0)
    if failure is not None:
        raise failure
    if shared[0] is None:
        return None
    if run is not None:
        print(run.note, flush=True)
        return run.cfg, run, run.resume_from
    for k, v in shared[0].items():
        setattr(cfg.training, k, v)
    return cfg, None, shared[1]


def cmd_evaluate(args) -> int:
    from adaptive_ir.api import checkpoint_config, evaluate_config
    from adaptive_ir.artifacts.checkpoint import pretrained_config
    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json
    from adaptive_ir.config import load_config
    from adaptive_ir.evaluation.metrics import format_table

    policy = None
    if args.policy is not None:
        if args.checkpoint is not None or args.config is not None:
            raise ConfigError(f"--policy {args.policy}: goes alone (its own config says how to index, mine and embed "
                              "the collection); drop --checkpoint / --config, and use --set to change a setting")
        overrides = _overrides(args)
        cfg, path, state = pretrained_config(args.policy, overrides.pop("data.data_dir", None), overrides)
        policy = (path, state)
    elif args.config is None and args.checkpoint is not None:
        cfg = checkpoint_config(args.checkpoint, _overrides(args))  # the config it was trained with
    else:
        cfg = load_config(args.config or "quickstart", _overrides(args))
    results, name, origin = evaluate_config(cfg, args.checkpoint, args.split, args.baselines, args.oracle,
                                            args.run_dir, not args.no_progress, policy=policy)
    if origin:
        print(origin, flush=True)
    table = format_table(results, f"{name} / {args.split}")
    print(table)
    if args.json:
        atomic_write_json(args.json, results)
    if args.markdown:
        atomic_write_bytes(args.markdown, (table + "\n").encode("utf-8"))
    return 0


def cmd_compare(args) -> int:
    import signal

    from adaptive_ir.common.errors import ConfigError
    from adaptive_ir.compare import CompareInterrupted, compare, parse_seeds
    from adaptive_ir.config import load_config

    seeds = parse_seeds(args.seeds)
    if args.permutations < 1:
        raise ConfigError(f"--permutations {args.permutations}: expected a positive number, e.g. 10000")
    cfg = load_config(args.config, _overrides(args))
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
    from adaptive_ir.inference.reformulate import Reformulator

    fmt = "json" if args.json else args.format
    if args.checkpoint and args.set:
        from adaptive_ir.common.errors import ConfigError
        raise ConfigError("--set goes with --policy: a checkpoint is reformulated with the config it was trained with")
    ref = (Reformulator.load(args.checkpoint, device=args.device, data_dir=args.data_dir) if args.checkpoint else
           Reformulator.from_pretrained(args.policy, args.data_dir, device=args.device,
                                        **{k: v for k, v in _overrides(args).items()
                                           if k not in ("data.data_dir", "system.device")}))
    # stdout stays pure JSON / queries with --format json / lucene: the checkpoint's origin then goes to stderr
    print(ref.origin, file=sys.stderr if fmt != "text" else sys.stdout, flush=True)
    results = ref.reformulate(args.queries, top_docs=args.top_docs)
    if fmt == "json":
        print(json.dumps(results, indent=1))
        return 0
    if fmt == "lucene":
        for r in results:
            print(r["lucene_query"])
        return 0
    for r in results:
        print(f"query:     {r['query']}")
        if r["start_terms"]:
            print(f"start:     the query + RM3's {', '.join(r['start_terms'])}")
        print(f"added:     {', '.join(r['added_terms']) or '(none: STOP)'}")
        print(f"rewritten: {r['rewritten']}")
        for rank, (doc, score) in enumerate(r["top_docs"], 1):
            print(f"  {rank:3d}. {doc}  {score:.4f}")
    return 0


def cmd_export(args) -> int:
    from adaptive_ir.api import export

    folder = export(args.checkpoint, args.output_dir, args.data_dir, _settings(args.apply, "--apply"))
    print(f"wrote {folder}/policy.safetensors, policy.json and README.md")
    return 0


def cmd_oracle(args) -> int:
    args.checkpoint, args.baselines, args.oracle, args.markdown, args.run_dir = None, True, True, None, None
    args.policy = None
    return cmd_evaluate(args)


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
