"""A TorchRL front end of the batched env: ``ReformulateTorchRLEnv``, an ``EnvBase`` of batch size ``[num_envs]`` on
the env's own device, whose tensordicts hold the engine's tensors (no copy to the host on an accelerator).

The observation, action, reward and episode end are ``gym_env``'s (its module docstring), as tensors: ``query``,
``candidates``, ``features`` (float32), ``valid``, ``chosen``, ``action_mask`` (bool), ``step`` (int64); the action
a ``Categorical`` over M·L + 1 with ``action_mask`` as its mask (TorchRL's ``ActionMask`` transform reads it).
``reset`` with a ``_reset`` entry restarts only those rows (``ReformulationEnv.restart``), as TorchRL's
partial resets ask. ``observation="rows"``: ``query_row`` and ``candidate_rows`` into ``query_table`` and
``term_table`` in place of the embeddings (``gym_env.OBSERVATIONS``). Needs TorchRL (the ``envs`` extra).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from adaptive_ir.config import Config
from adaptive_ir.envs.source import EnvSource

_BOOL_KEYS = ("valid", "chosen", "action_mask")


class ReformulateTorchRLEnv(EnvBase):
    """``num_envs`` episodes of the batched env as one TorchRL env."""

    def __init__(self, num_envs: int = 1, config: str | Config = "quickstart", data_dir: str | None = None,
                 split: str = "train", device: str | None = None, observation: str = "embeddings", **overrides: Any):
        if observation not in ("embeddings", "rows"):
            raise ValueError(f"observation={observation!r}: expected embeddings or rows")
        src = EnvSource.build(config, data_dir, split, device, **overrides)
        super().__init__(device=src.env.device, batch_size=torch.Size([num_envs]))
        self.source, self.num_envs, self.rows = src, num_envs, observation == "rows"
        self.query_table, self.term_table = src.tables.query, src.tables.term
        """The embeddings ``query_row`` and ``candidate_rows`` index (``observation="rows"``), on the env's device."""
        m, d, f = src.qs.max_candidates, src.tables.query.shape[1], src.qs.cand_feats.shape[2]
        b, dev = (num_envs,), self.device
        if self.rows:
            ids = {"query_row": Unbounded(b, device=dev, dtype=torch.int64),
                   "candidate_rows": Unbounded((*b, m), device=dev, dtype=torch.int64)}
        else:
            ids = {"query": Unbounded((*b, d), device=dev), "candidates": Unbounded((*b, m, d), device=dev)}
        qf = src.qs.query_feats
        if src.env.choice and qf is not None:  # retrieval.start: choose (gym_env's docstring)
            ids |= {"query_features": Unbounded((*b, qf.shape[1]), device=dev),
                    "switched": Unbounded(b, device=dev, dtype=torch.bool)}
        self.observation_spec = Composite(
            **ids, features=Unbounded((*b, m, f), device=dev), valid=Binary(m, (*b, m), device=dev, dtype=torch.bool),
            chosen=Binary(m, (*b, m), device=dev, dtype=torch.bool),
            step=Unbounded((*b,), device=dev, dtype=torch.int64),
            action_mask=Binary(src.num_actions, (*b, src.num_actions), device=dev, dtype=torch.bool),
            shape=b, device=dev)
        self.action_spec = Categorical(src.num_actions, b, device=dev)
        self.reward_spec = Unbounded((*b, 1), device=dev)
        self._generator = torch.Generator()  # CPU: the env's query positions are host tensors

    def _draw(self, n: int) -> torch.Tensor:
        return torch.randint(0, len(self.source.qs), (n,), generator=self._generator)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        env = self.source.env
        partial = tensordict.get("_reset", None) if tensordict is not None else None
        if partial is None or env.terms is None:
            env.reset(self._draw(self.num_envs))
        else:
            rows = partial.reshape(-1).nonzero().squeeze(1).cpu()
            if rows.numel():
                env.restart(rows, self._draw(rows.numel()))
        done = torch.zeros((self.num_envs, 1), dtype=torch.bool, device=self.device)
        return TensorDict({**self.source.observe(self.rows), "done": done, "terminated": done.clone()},
                          batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        src = self.source
        reward, terminated = src.env.step(src.legalize(tensordict.get("action").reshape(-1)))
        done = terminated[:, None]
        return TensorDict({**self.source.observe(self.rows), "reward": reward[:, None], "done": done, "terminated": done.clone()},
                          batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        self._generator.manual_seed(0 if seed is None else int(seed))


__all__ = ["ReformulateTorchRLEnv"]
