"""The standard-RL front ends' overhead: env steps/s of the batched env itself, of the Gymnasium vector env over it
and of the TorchRL env over it, same config, same B, one process, one run.

Each loop plays random legal actions (one draw over the action mask, the same for all three) and starts a new
episode in every row whose episode ended: the native loop with ``ReformulationEnv.restart``, the Gymnasium env by its
NextStep autoreset, the TorchRL env by ``step_and_maybe_reset``'s partial resets. The front ends add what they are
for: each step's whole observation (the query's and every candidate's embedding, the features, the masks) as numpy
arrays (Gymnasium) or a tensordict (TorchRL); and again with ``observation="rows"`` (the embeddings' rows instead).

    python benchmarks/envs.py --config scifact --data-dir ../shared/datasets/scifact --batch 256 --threads 1 \
        --json benchmarks/results/envs.json
"""

from __future__ import annotations

import time

import _common as common
import numpy as np
import torch

from adaptive_ir.envs import ReformulateVectorEnv
from adaptive_ir.envs.torchrl_env import ReformulateTorchRLEnv


def pick(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One random legal action per row of a (B, A) mask."""
    return (torch.rand(mask.shape, generator=gen) * mask.float()).argmax(1)


def native_loop(env, draw, steps: int, gen: torch.Generator) -> None:
    for _ in range(steps):
        _, terminated = env.step(pick(env.legal(), gen))
        if terminated.any():
            rows = terminated.nonzero().squeeze(1)
            env.restart(rows, draw(rows.numel()))


def gym_loop(venv: ReformulateVectorEnv, steps: int, gen: torch.Generator) -> None:
    obs, _ = venv.reset(seed=0)
    for _ in range(steps):
        obs, *_ = venv.step(pick(torch.from_numpy(obs["action_mask"]), gen).numpy())


def torchrl_loop(env: ReformulateTorchRLEnv, steps: int, gen: torch.Generator) -> None:
    td = env.reset()
    for _ in range(steps):
        td["action"] = pick(td["action_mask"], gen)
        _, td = env.step_and_maybe_reset(td)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=200, help="lockstep steps timed per front end")
    p.add_argument("--output-dir", default=None, help="training.output_dir (its cache is reused across runs)")
    args = p.parse_args()
    device = common.setup(args)
    steps = 5 if args.quick else args.steps
    keys = {k.replace(".", "__"): v for k, v in (item.split("=", 1) for item in args.set)}
    if args.output_dir:
        keys["training__output_dir"] = args.output_dir
    venv = ReformulateVectorEnv(args.batch, args.config, args.data_dir, "train", str(device), **keys)
    trl = ReformulateTorchRLEnv(args.batch, args.config, args.data_dir, "train", str(device), **keys)
    rows_venv = ReformulateVectorEnv(args.batch, args.config, args.data_dir, "train", str(device),
                                     observation="rows", **keys)
    rows_trl = ReformulateTorchRLEnv(args.batch, args.config, args.data_dir, "train", str(device), observation="rows",
                                     **keys)
    src = venv.source
    rng = np.random.default_rng(0)
    draw = lambda n: torch.from_numpy(rng.integers(0, len(src.qs), n))  # noqa: E731
    gen = torch.Generator().manual_seed(0)
    src.env.reset(draw(args.batch))
    native_loop(src.env, draw, 3, gen)  # warm-up: compiled kernels loaded, lanes allocated
    seconds = {"native": timed(lambda: native_loop(src.env, draw, steps, gen)),
               "gymnasium": timed(lambda: gym_loop(venv, steps, gen)),
               "torchrl": timed(lambda: torchrl_loop(trl, steps, gen)),
               "gymnasium_rows": timed(lambda: gym_loop(rows_venv, steps, gen)),
               "torchrl_rows": timed(lambda: torchrl_loop(rows_trl, steps, gen))}
    per_s = {name: round(args.batch * steps / s, 1) for name, s in seconds.items()}
    nbytes = {rows: int(sum(v.numel() * v.element_size() for v in src.observe(rows).values())) for rows in (False, True)}
    common.write_json(args.json, {
        "machine": common.machine(device),
        "settings": {"config": args.config, "data_dir": args.data_dir, "batch": args.batch, "steps": steps,
                     "train_queries": len(src.qs), "candidates": src.qs.max_candidates,
                     "embedding_dim": int(src.tables.query.shape[1]),
                     "observation_bytes_per_step": {"embeddings": nbytes[False], "rows": nbytes[True]}},
        "env_steps_per_s": per_s,
        "share_of_native": {name: round(v / per_s["native"], 3) for name, v in per_s.items() if name != "native"},
    })


if __name__ == "__main__":
    main()
