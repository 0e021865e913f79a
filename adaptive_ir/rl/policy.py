"""The actor-critic: scores every candidate of every episode in one forward, plus STOP and a state value.

Inputs per episode: the embedding of q0, of the current query (q0 plus the chosen terms), and for each of the M
candidates its embedding and features (``agent_feature_names``): the miner's features as mined and z-scored over
the query's own candidates (what makes a term stand out *among this query's* candidates: raw scores of different
queries are not comparable), its rank in the miner's order, the already-chosen flag, the step fraction and its
cosines to q0 and to the current query. Each candidate gets L logits, one per expansion weight (``levels``). Candidates are
projected to ``hidden_dim``, conditioned on the query context, optionally mixed by a transformer encoder over
the candidate set (``num_layers`` > 0; no positions: the set is unordered), and scored by a small MLP; STOP and
the value come from the context token. ``num_layers: 0`` (the shipped configs) scores candidates independently
given the context: measured 8-20x cheaper per forward on the CPU than one 128-wide layer (benchmarks/), and the
chosen terms still reach every candidate through the current-query embedding and the similarity features.

With a choice of start (``retrieval.start: choose``) the context also reads the query's own features
(``mining.query_features``) and whether the episode switched, and the policy is factorised. At the first step a
*selector* (``StartSelector``: logistic regression on the standardised query features) gives the probability of the
switch to RM3; otherwise the context token scores the kind of action (a term or STOP), and a term's probability is
its kind's times its share among the terms. PPO does not train the selector: it stays at ½ while training, so both
starts are explored equally and the policy learns to rewrite from each, and it is fitted by ``rl.selector`` on the
train queries, whose outcome from either start is known exactly (a full-information choice: supervised fitting
uses every query's both outcomes, where a policy gradient sees one). Measured before this design: the switch as one
more action of a flat softmax was taken in 4 % of training episodes (the entropy bonus held it near 1/(M·L + 2));
as a third kind trained by PPO, on 99 % of NFCorpus's dev queries, below the policy without the choice on all four
collections' dev splits.
"""

from __future__ import annotations

import importlib
import math
from typing import NamedTuple

import torch
from torch import nn

from adaptive_ir.common.errors import ConfigError
from adaptive_ir.rl.env import QuerySet, per_action

EXTRA_FEATURES = ("chosen", "step_fraction", "cos_q0", "cos_current", "rank")
"""Features the agent adds to the miner's: chosen flag, step fraction, cosine to q0 and to the current query, and
the candidate's rank in the miner's order (over M)."""


def agent_feature_names(miner_features: list[str]) -> list[str]:
    """The policy's per-candidate inputs, in order: the miner's features, the same z-scored per query, its own."""
    return [*miner_features, *(f"z:{name}" for name in miner_features), *EXTRA_FEATURES]


def standardise(feats: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B, M, F) features z-scored over each query's valid candidates (0 where invalid, and for a feature that
    is the same for all of them)."""
    w = valid.unsqueeze(-1).to(feats.dtype)
    n = w.sum(1, keepdim=True).clamp(min=1)
    mean = (feats * w).sum(1, keepdim=True) / n
    var = ((feats - mean) ** 2 * w).sum(1, keepdim=True) / n
    return (feats - mean) * torch.rsqrt(var.clamp(min=1e-8)) * (var > 1e-8) * w


class StartSelector(nn.Module):
    """The switch's logit at the first step, from a query's features: a logistic regression on the features
    standardised by ``mean`` and ``scale`` (buffers, saved with the weights). Fitted, not trained: its parameters
    take no gradient (``rl.selector.fit_selector``); zero until fitted, so the switch has probability ½."""

    mean: torch.Tensor
    scale: torch.Tensor

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        self.linear.requires_grad_(False)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """(B,) logits of the switch for (B, G) query features."""
        return self.linear((feats - self.mean) / self.scale).squeeze(-1)


class ActorCritic(nn.Module):
    """Candidate scorer over tensors only (the part DataParallel splits across GPUs)."""

    def __init__(self, emb_dim: int, feat_dim: int, hidden_dim: int = 128, num_heads: int = 4,
                 num_layers: int = 1, levels: int = 1, query_dim: int | None = None):
        """``query_dim``: G, the query features of a choice of start (None: no choice, no switch logit)."""
        super().__init__()
        self.levels = levels
        self.choice = query_dim is not None
        extra = 0 if query_dim is None else query_dim + 1  # the features and the switched flag
        self.ctx = nn.Sequential(nn.Linear(2 * emb_dim + 1 + extra, hidden_dim), nn.GELU(),
                                 nn.Linear(hidden_dim, hidden_dim))
        self.cand_emb = nn.Linear(emb_dim, hidden_dim)
        self.cand_feat = nn.Sequential(nn.Linear(feat_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, hidden_dim))
        self.mixer = None
        if num_layers > 0:
            # no dropout: the PPO ratio needs the update's forward to equal the rollout's
            layer = nn.TransformerEncoderLayer(hidden_dim, num_heads, dim_feedforward=2 * hidden_dim,
                                               dropout=0.0, batch_first=True, norm_first=True)
            self.mixer = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.cand_head = nn.Sequential(nn.GELU(), nn.Linear(hidden_dim, hidden_dim), nn.GELU(),
                                       nn.Linear(hidden_dim, levels))
        # the order the layers are made in is the order a seed's random weights are drawn in: kept as each network
        # was first trained (STOP's head before value_head), so that a seed gives the same run as it did
        if not self.choice:
            self.stop_head = nn.Sequential(nn.GELU(), nn.Linear(hidden_dim, 1))
        self.value_head = nn.Sequential(nn.Linear(2 * hidden_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, 1))
        if self.choice:  # the kinds: a term, STOP; the switch is the selector's
            assert query_dim is not None
            self.kind_head = nn.Sequential(nn.GELU(), nn.Linear(hidden_dim, 2))
            self.kind_bias = nn.Parameter(torch.zeros(2))
            self.selector = StartSelector(query_dim)
        else:
            self.stop_bias = nn.Parameter(torch.zeros(()))

    def init_stop_prior(self, num_actions: int) -> None:
        """Start with P(STOP) ≈ 1/2 at every step (``num_actions``: M·L, the actions but STOP): the untrained agent
        mostly keeps the original query (do no harm), and learns to add the terms that pay. With a uniform start
        STOP has 1/(M·L+1) probability, and on collections where BM25 is already strong (SciFact) PPO was measured
        never to learn to stop."""
        with torch.no_grad():
            if self.choice:  # P(STOP) = P(a term) ≈ 1/2 once the start is chosen
                self.kind_bias.zero_()
            else:
                self.stop_bias.fill_(math.log(num_actions))

    def forward(self, q0: torch.Tensor, cur: torch.Tensor, step: torch.Tensor, cand: torch.Tensor,
                feats: torch.Tensor, legal: torch.Tensor, query: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, A) masked logits (candidate-major, then the switch when ``choice``, STOP last) and (B,) values;
        ``legal`` (B, A); ``query`` (B, G + 1): the query features and the switched flag (``choice`` only)."""
        b, m = cand.shape[:2]
        open_ = legal[:, : m * self.levels].view(b, m, self.levels).any(-1)  # (B, M) candidates still to choose
        ctx = self.ctx(torch.cat([q0, cur, step[:, None], *([] if query is None else [query])], dim=1))  # (B, H)
        tok = self.cand_emb(cand) + self.cand_feat(feats) + ctx[:, None, :]  # (B, M, H)
        if self.mixer is not None:
            seq = torch.cat([ctx[:, None, :], tok], dim=1)
            pad = torch.cat([torch.zeros_like(open_[:, :1]), ~open_], dim=1)
            # chosen/padded candidates are not attended to; the context token always is, so no row is empty
            seq = self.mixer(seq, src_key_padding_mask=pad)
            ctx, tok = seq[:, 0], seq[:, 1:]
        terms = self.cand_head(tok).reshape(b, m * self.levels).float()
        if self.choice:
            assert query is not None
            low = torch.finfo(torch.float32).min
            n = m * self.levels
            kind_legal = torch.stack([legal[:, :n].any(1), legal[:, n + 1]], 1)
            kind = torch.log_softmax((self.kind_head(ctx) + self.kind_bias).float().masked_fill(~kind_legal, low), 1)
            share = torch.log_softmax(terms.masked_fill(~legal[:, :n], low), 1)
            sel = self.selector(query[:, :-1].float())  # the features, not the switched flag
            first = legal[:, n]  # the switch is legal: the first step
            log_sw = torch.where(first, nn.functional.logsigmoid(sel), low)
            log_stay = torch.where(first, nn.functional.logsigmoid(-sel), 0.0)
            logits = torch.cat([log_stay[:, None] + kind[:, :1] + share, log_sw[:, None],
                                log_stay[:, None] + kind[:, 1:]], dim=1)
        else:
            logits = torch.cat([terms, (self.stop_head(ctx) + self.stop_bias).float()], dim=1)
        logits = logits.masked_fill(~legal, torch.finfo(logits.dtype).min)
        live = open_[:, :, None].to(tok.dtype)
        pooled = (tok * live).sum(1) / live.sum(1).clamp(min=1)
        value = self.value_head(torch.cat([ctx, pooled], dim=1)).squeeze(-1).float()
        return logits, value


POLICIES: dict[str, type[nn.Module]] = {"actor-critic": ActorCritic}
"""The policy networks ``rl_agent.policy`` names; any other value is ``module:Class``."""


def policy_class(name: str) -> type[nn.Module]:
    """The network class ``rl_agent.policy`` names (a key of POLICIES, or ``module:Class``)."""
    if name in POLICIES:
        return POLICIES[name]
    module, _, attr = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr) if module and attr else None
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"rl_agent.policy: {name!r} cannot be imported ({e}); give one of "
                          f"{', '.join(POLICIES)} or module:Class of an importable nn.Module") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"rl_agent.policy: {name!r} is not an nn.Module class; give one of {', '.join(POLICIES)} "
                          "or module:Class")
    return cls


def policy_name(cls: type[nn.Module]) -> str:
    """``rl_agent.policy``'s value for a network class (its POLICIES key, else ``module:Class``)."""
    return next((key for key, value in POLICIES.items() if value is cls), f"{cls.__module__}:{cls.__qualname__}")


class EpisodeInputs(NamedTuple):
    """What the policy reads about each episode's query, fixed for the whole episode (gathered once per rollout
    round; per sample in the update)."""

    valid: torch.Tensor
    """(B, M) real candidate slots."""
    cand: torch.Tensor
    """(B, M, D) candidate embeddings."""
    q0: torch.Tensor
    """(B, D) embedding of the original query."""
    feats: torch.Tensor
    """(B, M, 2F) the miner's candidate features, as mined and z-scored per query (``standardise``)."""
    sim_q0: torch.Tensor
    """(B, M, 1) candidate · q0."""
    query: torch.Tensor
    """(B, G) the query's own features (``QuerySet.query_feats``; G = 0 without a choice of start)."""


class Agent(nn.Module):
    """Embedding tables + ActorCritic. Builds observations from ids, so rollouts store ids, not vectors."""

    feature_mask: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, emb_dim: int, feat_dim: int, max_steps: int, hidden_dim: int = 128, num_heads: int = 4,
                 num_layers: int = 1, levels: int = 1, feature_mask: torch.Tensor | None = None,
                 core: type[nn.Module] = ActorCritic, query_dim: int | None = None):
        """``feat_dim``: F, the miner's features; ``levels``: L, the expansion weights an action chooses among;
        ``feature_mask`` (2F + len(EXTRA_FEATURES),): 0 for an input held at 0 (rl_agent.ignore_features);
        ``core``: the network class (``rl_agent.policy``), built and called as ActorCritic is; ``query_dim``: G,
        the query features of a choice of start (``retrieval.start: choose``; passed to the core only then)."""
        super().__init__()
        self.max_steps, self.levels, self.choice = max_steps, levels, query_dim is not None
        width = 2 * feat_dim + len(EXTRA_FEATURES)
        choice = {} if query_dim is None else {"query_dim": query_dim}
        self.core = core(emb_dim, width, hidden_dim, num_heads, num_layers, levels, **choice)
        mask = torch.ones(width) if feature_mask is None else feature_mask.float()
        # not saved with the weights: it follows from the config, which the policy spec records
        self.register_buffer("feature_mask", mask, persistent=False)
        self._runner = self._local = self.core
        self.query_table: torch.Tensor | None = None
        self.term_table: torch.Tensor | None = None

    def use_tables(self, tables) -> None:
        """Point the agent at the embedding tables of the QuerySet it will act on (data, not parameters:
        each split has its own rows, computed by the same embedder)."""
        self.query_table, self.term_table = tables.query, tables.term

    def parallelize(self, runner: nn.Module) -> None:
        """Run the PPO update's forwards through ``runner`` (a DataParallel / DDP wrapper of ``self.core``);
        rollouts and evaluation keep the bare core on one device.

        Kept out of the module tree (object.__setattr__) so state_dict keys stay the same with or without it.
        """
        object.__setattr__(self, "_runner", runner)

    @property
    def parallelized(self) -> bool:
        """Whether the update's forwards run through a DataParallel / DDP wrapper (``parallelize``)."""
        return self._runner is not self.core

    def compile_local(self, mode: str | None = None) -> None:
        """Run the rollout and evaluation forwards (the bare core) through ``torch.compile`` as one graph; the
        update's forwards (large minibatches, or a DDP / DataParallel wrapper) stay eager."""
        object.__setattr__(self, "_local", torch.compile(self.core, fullgraph=True, mode=mode))

    def episode_inputs(self, qs: QuerySet, qidx: torch.Tensor) -> EpisodeInputs:
        """The fixed part of the observation of episodes at query positions ``qidx`` (B,)."""
        assert self.term_table is not None and self.query_table is not None  # set by use_tables
        cand = self.term_table[qs.cand_rows[qidx]]  # (B, M, D)
        q0 = self.query_table[qs.q_rows[qidx]]
        valid, feats = qs.cand_valid[qidx], qs.cand_feats[qidx]
        if self.choice and qs.query_feats is None:
            raise ValueError("this policy chooses its start (retrieval.start: choose); the QuerySet has no query "
                             "features")
        query = qs.query_feats[qidx] if self.choice and qs.query_feats is not None else q0[:, :0]
        return EpisodeInputs(valid, cand, q0, torch.cat([feats, standardise(feats, valid)], -1),
                             cand @ q0.unsqueeze(-1), query)

    def forward(self, ep: EpisodeInputs, chosen: torch.Tensor, step: torch.Tensor,
                started: torch.Tensor | None = None, parallel: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, A) and values (B,) of episodes ``ep`` with ``chosen`` (B, M) terms at ``step`` (B,); A is
        M·L+1, or M·L+2 with a choice of start, whose switch is legal at step 0 and ``started`` (B,) says which
        episodes took it. ``parallel``: through the update's wrapper (DataParallel / DDP) rather than the bare
        core."""
        b, m = chosen.shape
        open_ = per_action(ep.valid & ~chosen, self.levels)
        switch = [(step == 0)[:, None]] if self.choice else []
        legal = torch.cat([open_, *switch, torch.ones_like(ep.valid[:, :1])], dim=1)
        chosen_f = chosen.to(ep.cand.dtype)
        cur = ep.q0 + (chosen_f.unsqueeze(1) @ ep.cand).squeeze(1)
        cur = cur / cur.norm(dim=1, keepdim=True).clamp(min=1e-6)
        frac = step * (1.0 / self.max_steps)
        rank = torch.arange(m, device=chosen.device, dtype=ep.cand.dtype) * (1.0 / m)
        # query-candidate similarities as explicit features: cheap, and they spare the small scorer from
        # having to learn a bilinear interaction
        feats = torch.cat([ep.feats, chosen_f.unsqueeze(-1), frac[:, None, None].expand(-1, m, 1),
                           ep.sim_q0, ep.cand @ cur.unsqueeze(-1), rank[None, :, None].expand(b, -1, 1)], dim=-1)
        feats = feats * self.feature_mask
        runner = self._runner if parallel else self._local
        if not self.choice:
            return runner(ep.q0, cur, frac, ep.cand, feats, legal)
        flag = (torch.zeros_like(frac) if started is None else started.to(frac.dtype))[:, None]
        return runner(ep.q0, cur, frac, ep.cand, feats, legal, torch.cat([ep.query.to(frac.dtype), flag], 1))
