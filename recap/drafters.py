"""Drafters: who proposes the candidate tree (DESIGN.md section 6).

Every method runs in the same engine; only the drafter differs. A drafter has two
methods (the contract the engine relies on):

    draft(seq)                           -> DraftTree   root = seq[-1]
    observe(keys, top_ids, top_probs, step=, depths=, verified=)
                                         record target predictions (and, after a
                                         verification, the tree and the target's argmax)

``seq`` is the request's token sequence so far (prompt and generated), ending with
the root token: the last accepted token, not yet
fed to the target. Drafters that keep no memory ignore ``observe``; the engine asks
``needs_predictions`` before paying for the top-k.

    ar     no draft: the root alone, one token per step
    pld    prompt lookup: the tokens after the latest n-gram match, one chain
    tr     Token Recycling: persistent 1-token rows filling a static breadth-first template
    recap  M1 + M2 + M3 fused by entropy confidence, best-first tree + suffix chains
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch

from recap.fusion import FUSION_MODES, Fused, fuse
from recap.memory import Calibration, RequestMemory
from recap.tree import DraftTree, add_chain, best_first, static_template, suffix_continuation

METHODS = ("ar", "pld", "tr", "recap")
#: Nominal probability of a suffix-match proposal (its calibration bin).
SUFFIX_PRIOR = 0.5


@dataclass
class RecapConfig:
    """Settings of the drafters (RECAP's, and the shared ones TR and PLD use).

    Defaults, by measurement on the embedded shapes model, 2-core CPU, fp32, one thread
    (``python -m recap bench --ablation``; docs/benchmark.md): tokens/s is flat from 4 to
    16 nodes (1.17-1.19x over HF greedy) and falls beyond 24 (32: 1.05x, 64: 0.87x)
    because a tree costs real compute on a CPU; MAT keeps rising with the budget (16:
    2.48, 24: 2.73, 64: 3.29). The default 24 is TR's budget too, so the two compare at
    equal tree size; ``budget="auto"`` (the app's default) measures the verify cost of
    this model on this device at load and picks the budget. Depth 8, 8 children, top-8
    rows, specificity (1, 2, 4): entropy fusion matched fixed weights and beat back-off.

    budget          drafted nodes per step (the root excluded), or "auto"
    max_depth       depth limit of the tree
    top_k           predictions kept per memory row (k)
    max_children    children pushed per expanded node
    specificity     weights s(n) for key lengths 1, 2, 3
    fusion          "entropy" (RECAP), "fixed" (0.7/0.2/0.1 by rank) or "backoff" (longest key only)
    eps             added to each entry's concentration before weighting
    use_m2, use_m3  use the 2- / 3-token request-local memories (ablations)
    suffix          propose suffix-matched continuations
    suffix_min_len  shortest context suffix that counts as a match
    suffix_max_tokens  tokens proposed after a match (also the nodes reserved for it)
    depth_discount  multiplies the path score once per level (1 = none)
    calibrate       rank paths by learned acceptance rates of proposals instead of raw
                    memory probabilities (see ``recap.memory.Calibration``)
    """

    budget: int | str = 24
    max_depth: int = 8
    top_k: int = 8
    max_children: int = 8
    specificity: tuple[float, float, float] = (1.0, 2.0, 4.0)
    fusion: str = "entropy"
    eps: float = 0.05
    use_m2: bool = True
    use_m3: bool = True
    suffix: bool = True
    suffix_min_len: int = 2
    suffix_max_tokens: int = 8
    depth_discount: float = 1.0
    calibrate: bool = True

    MAX_BUDGET = 256
    MAX_DEPTH = 32
    MAX_TOP_K = 64

    def __post_init__(self) -> None:
        if isinstance(self.budget, str):
            if self.budget != "auto":
                raise ValueError(f"budget must be a positive integer or 'auto', got {self.budget!r}")
        else:
            _check_int("budget", self.budget, 1, self.MAX_BUDGET)
        _check_int("max_depth", self.max_depth, 1, self.MAX_DEPTH)
        _check_int("top_k", self.top_k, 1, self.MAX_TOP_K)
        _check_int("max_children", self.max_children, 1, self.MAX_TOP_K)
        _check_int("suffix_min_len", self.suffix_min_len, 1, 16)
        _check_int("suffix_max_tokens", self.suffix_max_tokens, 1, 64)
        spec = tuple(self.specificity)
        if len(spec) != 3 or not all(isinstance(s, (int, float)) and math.isfinite(s) and s > 0 for s in spec):
            raise ValueError(f"specificity must be three positive numbers, got {self.specificity!r}")
        self.specificity = tuple(float(s) for s in spec)  # type: ignore[assignment]
        if self.fusion not in FUSION_MODES:
            raise ValueError(f"fusion must be one of {FUSION_MODES}, got {self.fusion!r}")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and 0 <= self.eps <= 1):
            raise ValueError(f"eps must be in [0, 1], got {self.eps!r}")
        if not (isinstance(self.depth_discount, (int, float)) and 0 < self.depth_discount <= 1):
            raise ValueError(f"depth_discount must be in (0, 1], got {self.depth_discount!r}")
        for name in ("use_m2", "use_m3", "suffix", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


class Drafter(Protocol):
    name: str
    needs_predictions: bool
    memory: RequestMemory | None

    def draft(self, seq: Sequence[int]) -> DraftTree: ...

    def observe(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
        verified: tuple[DraftTree, Sequence[int]] | None = None,
    ) -> None: ...


@dataclass
class _MemoryDrafter:
    """Shared ``observe`` for drafters that recycle target predictions."""

    memory: RequestMemory
    needs_predictions: bool = field(default=True, init=False)

    def observe(
        self,
        keys: Sequence[tuple[int | None, int | None, int]],
        top_ids: torch.Tensor,
        top_probs: torch.Tensor,
        *,
        step: int,
        depths: Sequence[int],
        verified: tuple[DraftTree, Sequence[int]] | None = None,
    ) -> None:
        self.memory.record(keys, top_ids, top_probs, step=step, depths=depths)
        if verified is not None:
            self.learn(*verified)

    def learn(self, tree: DraftTree, argmax: Sequence[int]) -> None:
        """After a verification: what the drafter learns beyond the memories (default: nothing)."""


class ARDrafter:
    """Autoregressive decoding: the tree is the root alone."""

    name = "ar"
    needs_predictions = False
    memory = None

    def draft(self, seq: Sequence[int]) -> DraftTree:
        return DraftTree.root(seq[-1])

    def observe(self, keys, top_ids, top_probs, *, step, depths, verified=None) -> None:  # noqa: ANN001
        return None


class PLDDrafter(ARDrafter):
    """Prompt lookup decoding: one chain after the latest matching n-gram (n = 3..1)."""

    name = "pld"

    def __init__(self, config: RecapConfig, blocked: frozenset[int] = frozenset(), max_ngram: int = 3) -> None:
        self.config = config
        self.blocked = blocked  # image placeholders: never matched, never proposed
        self.max_ngram = max_ngram

    def draft(self, seq: Sequence[int]) -> DraftTree:
        tree = DraftTree.root(seq[-1])
        chain = suffix_continuation(
            seq, min_len=1, max_len=self.max_ngram, max_tokens=self.config.max_depth, blocked=self.blocked
        )
        add_chain(tree, chain, max_new=len(chain), max_depth=self.config.max_depth, confidence=1.0, origin="lookup")
        return tree


class TRDrafter(_MemoryDrafter):
    """Token Recycling: fill a static template breadth-first from the 1-token rows."""

    name = "tr"

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int) -> None:
        super().__init__(memory)
        self.config = config
        self.template = static_template(budget, config.max_depth, memory.k)

    def draft(self, seq: Sequence[int]) -> DraftTree:
        tree = DraftTree.root(seq[-1])
        where = {0: 0}  # template index -> tree index (absent: that subtree is dropped)
        lookups: dict[int, Any] = {}
        for t_idx, (t_parent, rank) in enumerate(self.template, start=1):
            parent = where.get(t_parent)
            if parent is None:
                continue
            ptok = tree.tokens[parent]
            if ptok not in lookups:
                lookups[ptok] = self.memory.m1.lookup(ptok)
            entry = lookups[ptok]
            if entry is None or rank >= len(entry.ids) or entry.probs[rank] <= 0:
                continue
            tok = entry.ids[rank]
            if tree.child(parent, tok) is not None:
                continue
            p = entry.normalised()[rank]
            where[t_idx] = tree.add(
                parent, tok, score=tree.scores[parent] * p, fused=p, sources=(("m1", 1.0, entry),), origin="m1"
            )
        return tree


class RecapDrafter(_MemoryDrafter):
    """RECAP: fused M1/M2/M3 predictions, best-first search, suffix-matched chains."""

    name = "recap"

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int) -> None:
        super().__init__(memory)
        self.config = config
        self.budget = budget
        memory.use_context = config.use_m2 or config.use_m3
        # ctx -> (the entries it was fused from, the result). Entries are immutable and a
        # write replaces them, so identical entry objects mean the fusion is still valid.
        self._fused: dict[tuple[int, ...], tuple[tuple[int, ...], Fused]] = {}
        self.calibration = memory.m1.calibration

    def _lookup(self, ctx: tuple[int, ...]) -> Fused | None:
        entries = self.memory.lookup(ctx)
        cfg = self.config
        if not cfg.use_m3:
            entries = [e for e in entries if e[0] != "m3"]
        if not cfg.use_m2:
            entries = [e for e in entries if e[0] != "m2"]
        if not entries:
            return None
        ident = tuple(id(e) for _, e in entries)  # the cached Fused keeps them alive: ids are stable
        hit = self._fused.get(ctx)
        if hit is not None and hit[0] == ident:
            return hit[1]
        fused = fuse(entries, cfg.specificity, cfg.eps, cfg.fusion)
        self._fused[ctx] = (ident, fused)
        return fused

    def _rate(self, fused: Fused, p: float) -> float:
        contextual = any(kind != "m1" for kind, _, _ in fused.sources)
        return self.calibration.rate(Calibration.CONTEXT if contextual else Calibration.TOKEN, p)

    def learn(self, tree: DraftTree, argmax: Sequence[int]) -> None:
        if not self.config.calibrate:
            return
        # Every drafted node is a calibration sample: was it the target's choice at its parent?
        classes, probs, hits = [], [], []
        for i in range(1, len(tree)):
            if tree.sources[i]:
                contextual = any(kind != "m1" for kind, _, _ in tree.sources[i])
                classes.append(Calibration.CONTEXT if contextual else Calibration.TOKEN)
                probs.append(tree.fused[i])
            else:  # a suffix-chain node the memories did not propose
                classes.append(Calibration.SUFFIX)
                probs.append(SUFFIX_PRIOR)
            hits.append(argmax[tree.parents[i]] == tree.tokens[i])
        self.calibration.update(classes, probs, hits)

    def draft(self, seq: Sequence[int]) -> DraftTree:
        cfg = self.config
        tree = DraftTree.root(seq[-1])
        if cfg.suffix:
            chain = suffix_continuation(
                seq,
                min_len=cfg.suffix_min_len,
                max_tokens=cfg.suffix_max_tokens,
                blocked=self.memory.image_token_ids,
            )
            confidence = self.calibration.rate(Calibration.SUFFIX, SUFFIX_PRIOR) if cfg.calibrate else SUFFIX_PRIOR
            add_chain(
                tree,
                chain,
                max_new=min(cfg.suffix_max_tokens, self.budget),
                max_depth=cfg.max_depth,
                confidence=confidence,
            )
        best_first(
            tree,
            seq,
            self._lookup,
            budget=self.budget,
            max_depth=cfg.max_depth,
            max_children=cfg.max_children,
            depth_discount=cfg.depth_discount,
            rate=self._rate if cfg.calibrate else None,
        )
        return tree.reordered()


def make_drafter(
    method: str,
    memory: RequestMemory | None,
    config: RecapConfig,
    budget: int,
    blocked: frozenset[int] = frozenset(),
) -> Drafter:
    if method == "ar":
        return ARDrafter()
    if method == "pld":
        return PLDDrafter(config, blocked)
    if memory is None:
        raise ValueError(f"method {method!r} needs a memory")
    if method == "tr":
        return TRDrafter(memory, config, budget)
    if method == "recap":
        return RecapDrafter(memory, config, budget)
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
