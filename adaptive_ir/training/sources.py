"""Where a run's episodes come from: each training collection's train queries (data_dir's, and each of
``data.also_train_on``), walked in seeded epochs by each DDP rank on its own stride, one collection drawn per update
by its share."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch

from adaptive_ir.artifacts.spec import data_identity
from adaptive_ir.common.errors import AdaptiveIRError
from adaptive_ir.config import Config
from adaptive_ir.rl.buffer import RolloutBuffer
from adaptive_ir.rl.env import QuerySet, ReformulationEnv
from adaptive_ir.rl.factory import make_env
from adaptive_ir.rl.workspace import Tables, Workspace

log = logging.getLogger(__name__)


class EpochSampler:
    """Query positions in seeded random order, each train query once per epoch."""

    def __init__(self, n: int, generator: torch.Generator):
        self.n, self.gen = n, generator
        self.perm = torch.randperm(n, generator=generator)
        self.pos = 0
        self.epoch = 0

    def next(self, b: int) -> torch.Tensor:
        out = []
        while b > 0:
            if self.pos == self.n:
                self.perm, self.pos, self.epoch = torch.randperm(self.n, generator=self.gen), 0, self.epoch + 1
            take = min(b, self.n - self.pos)
            out.append(self.perm[self.pos:self.pos + take])
            self.pos, b = self.pos + take, b - take
        return torch.cat(out)

    def state_dict(self) -> dict:
        # the generator too: the permutations of the epochs after a resume must be those of an unbroken run
        return {"perm": self.perm, "pos": self.pos, "epoch": self.epoch, "generator": self.gen.get_state()}

    def load_state_dict(self, s: dict) -> None:
        self.perm, self.pos, self.epoch = s["perm"], s["pos"], s["epoch"]
        self.gen.set_state(s["generator"])


@dataclass
class TrainSource:
    """One collection's train queries as the rollout sees them (data_dir's, or one of data.also_train_on's)."""

    name: str
    data: dict[str, str]
    """The identity of its collection (``spec.data_identity``)."""
    qs: QuerySet
    tables: Tables
    env: ReformulationEnv
    shard: torch.Tensor
    """This rank's stride of the query positions (DDP: each rank walks its own)."""
    sampler: EpochSampler
    buf: RolloutBuffer
    """Shaped for this query set's candidates."""


def sampler_seed(seed: int, source: int) -> int:
    """The seed of the epoch order of source number ``source`` on the rank whose streams start at ``seed``."""
    return seed + 2 + 10 * source


class Sources:
    """The run's training collections (``sources[0]``: data_dir's train queries) and the draw of the one each update
    rolls out on: the same stream on every DDP rank, so that all ranks roll out an update on the same collection."""

    def __init__(self, cfg: Config, device: torch.device, rank: int, world: int, episodes: int, progress: bool):
        """``episodes``: an update's episodes on one rank (the buffers' width)."""
        self.cfg, self.device, self.rank, self.world = cfg, device, rank, world
        self.episodes, self.progress = episodes, progress
        self.sources: list[TrainSource] = []
        self.gen = torch.Generator().manual_seed(cfg.system.seed + 4)
        self.share: list[float] = []
        """Probability that an update rolls out on each source."""

    def add(self, ws: Workspace, qs: QuerySet, tables: Tables, seed: int) -> TrainSource:
        """A collection's train queries as a source; ``seed``: its epoch order's (``sampler_seed``)."""
        # DDP: each rank walks its own stride of the train queries, so an update sees world × the episodes
        shard = torch.arange(self.rank, len(qs), self.world)
        if len(shard) == 0:
            raise AdaptiveIRError(f"{ws.collection.name}: {len(qs)} train queries cannot be shared by {self.world} "
                                  "processes; use fewer processes (--nproc_per_node)")
        buf = RolloutBuffer(self.cfg.rl_agent.max_steps_per_episode, self.episodes, qs.max_candidates, self.device)
        src = TrainSource(ws.collection.name, data_identity(ws), qs, tables, make_env(self.cfg, ws, qs), shard,
                          EpochSampler(len(shard), torch.Generator().manual_seed(seed)), buf)
        self.sources.append(src)
        self.share = self._shares()
        return src

    def add_also(self, folder: str, seed: int, phases_into: Workspace) -> TrainSource:
        """The train queries of one data.also_train_on collection: its own index, candidates and embeddings (cached
        like data_dir's), built with this run's settings; its phases count in ``phases_into``'s. Its dev split is
        loaded so that, where the collection has none, the same train queries are carved out as when it is trained
        on alone; its test judgments stay unread."""
        data = dataclasses.replace(self.cfg.data, data_dir=folder, max_train_queries=None, also_train_on=[],
                                   also_train_share=None)
        ws = Workspace(dataclasses.replace(self.cfg, data=data), self.device, progress=self.progress,
                       splits=("train", "dev"))
        qs, tables = ws.split("train", judged_only=True)
        for phase, seconds in ws.phases.seconds.items():
            phases_into.phases.add(f"{phase} ({ws.collection.name})", seconds)
        log.info("also training on %s: %d train queries", folder, len(qs))
        return self.add(ws, qs, tables, seed)

    def _shares(self) -> list[float]:
        counts = [len(src.qs) for src in self.sources]
        also = self.cfg.data.also_train_share
        if also is None or len(counts) == 1:
            return [c / sum(counts) for c in counts]
        rest = sum(counts[1:])
        return [1.0 - also] + [also * c / rest for c in counts[1:]]

    def __iter__(self):
        return iter(self.sources)

    def __getitem__(self, i: int) -> TrainSource:
        return self.sources[i]

    @property
    def num_queries(self) -> int:
        return sum(len(src.qs) for src in self.sources)

    @property
    def also_data(self) -> list[dict[str, str]]:
        """The identity of each data.also_train_on collection (recorded in checkpoints and exported cards)."""
        return [{"name": src.name, **src.data} for src in self.sources[1:]]

    def draw(self) -> TrainSource:
        """The collection this update rolls out on: drawn by its share (none drawn with one collection)."""
        if len(self.sources) == 1:
            return self.sources[0]
        return self.sources[int(torch.multinomial(torch.tensor(self.share), 1, generator=self.gen))]

    def state_dict(self) -> dict:
        """The checkpoint's ``sampler``, ``also_samplers`` and ``source_rng`` entries."""
        return {"sampler": self.sources[0].sampler.state_dict(),
                "also_samplers": [src.sampler.state_dict() for src in self.sources[1:]],
                "source_rng": self.gen.get_state()}

    def load_samplers(self, s: dict) -> None:
        """Rank 0's epoch orders from a checkpoint."""
        self.sources[0].sampler.load_state_dict(s["sampler"])
        for src, state in zip(self.sources[1:], s.get("also_samplers", [])):
            src.sampler.load_state_dict(state)

    def reseed_samplers(self, seed: int) -> None:
        """Fresh epoch orders from ``seed`` (a DDP rank other than 0 after a resume)."""
        for i, src in enumerate(self.sources):
            src.sampler = EpochSampler(len(src.shard), torch.Generator().manual_seed(sampler_seed(seed, i)))


__all__ = ["EpochSampler", "Sources", "TrainSource", "sampler_seed"]
