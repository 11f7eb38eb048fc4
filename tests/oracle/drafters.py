"""RECAP's and Token Recycling's drafters over the oracle memories (DESIGN.md sections 2-5): the
keys a pass's predictions are filed under, the fused lookup, the draft (``oracle.search``), the
calibration samples, and Token Recycling's static template filled from M1."""

from __future__ import annotations

from collections.abc import Sequence

from oracle.fusion import Fused, fuse
from oracle.memory import Calibration, RequestMemory
from oracle.search import add_chain, best_first, laid_out, suffix_continuation
from recap.core.config import RecapConfig
from recap.drafting.protocol import DraftState, Verification
from recap.drafting.recap_drafter import SUFFIX_PRIOR
from recap.drafting.tree import DraftTree, static_template
from recap.drafting.treecost import PassCost

Key = tuple[int | None, int | None, int]


def last_key(tokens: Sequence[int]) -> Key:
    """The key ending at the last of ``tokens``: it and the (up to) two tokens before it."""
    a, b, c = [None, None, *tokens[-3:]][-3:]
    return a, b, c


def prompt_keys(seq: Sequence[int]) -> list[Key]:
    """Keys ending at each of ``seq[:-1]``."""
    return [last_key(seq[: i + 1]) for i in range(len(seq) - 1)]


def node_keys(tree: DraftTree, seq: Sequence[int]) -> list[Key]:
    """Keys ending at every node of ``tree``, whose root ends ``seq``: the request, then the path."""
    return [last_key([*seq[:-1], *tree.path_tokens(i)]) for i in range(len(tree))]


class Recycling:
    """The shared update: every prediction of a pass recorded (the accepted path last), then ``learn``."""

    def __init__(self, memory: RequestMemory, budget: int) -> None:
        self.memory, self.budget = memory, budget

    def update(self, state: DraftState, verified: Verification) -> None:
        tree = verified.tree
        if tree is None:
            keys = prompt_keys(state.seq)
            self.memory.record(keys, verified.top_ids, verified.top_probs, step=0, depths=[0] * len(keys))  # type: ignore[arg-type]
            return
        on_path = set(verified.path)
        order = [i for i in range(len(tree)) if i not in on_path] + list(verified.path)
        self.memory.record(
            node_keys(tree, state.seq),
            verified.top_ids,
            verified.top_probs,  # type: ignore[arg-type]
            step=state.step,
            depths=tree.depths,
            order=order,
        )
        drawn = range(len(tree)) if verified.drawn is None else verified.drawn
        self.learn(tree, verified.picked, frozenset(drawn))

    def learn(self, tree: DraftTree, picked: Sequence[int], drawn: frozenset[int]) -> None:
        """What the drafter learns beyond the memories (default: nothing)."""


class Recap(Recycling):
    """RECAP: the suffix chain, then best-first search over fused M3 / M2 / M1 rows."""

    def __init__(
        self, memory: RequestMemory, config: RecapConfig, budget: int, cost: PassCost | None = None
    ) -> None:
        super().__init__(memory, budget)
        self.config, self.cost = config, cost
        memory.use_context = config.use_m2 or config.use_m3
        self.use_m2 = memory.use_context and config.use_m2
        self.use_m3 = memory.use_context and config.use_m3
        self.calibration: Calibration = memory.m1.calibration
        self.last_stop = ""

    def lookup(self, ctx: tuple[int, ...]) -> Fused | None:
        """The fused distribution after ``ctx`` (its last 1-3 tokens), or None."""
        memory, n = self.memory, len(ctx)
        entries = [
            ("m3", memory.m3.get(ctx) if self.use_m3 and n == 3 else None),
            ("m2", memory.m2.get(ctx[-2:]) if self.use_m2 and n >= 2 else None),
            ("m1", memory.m1.lookup(ctx[-1])),
        ]
        known = [(kind, e) for kind, e in entries if e is not None]
        return fuse(known, self.config.specificity, self.config.eps, self.config.fusion) if known else None

    def rate(self, fused: Fused, p: float) -> float:
        return self.calibration.rate(Calibration.CONTEXT if fused.contextual else Calibration.TOKEN, p)

    def draft(self, state: DraftState) -> DraftTree:
        cfg, seq = self.config, state.seq
        tree = DraftTree.root(seq[-1])
        if cfg.suffix:
            chain = suffix_continuation(
                seq,
                min_len=cfg.suffix_min_len,
                max_tokens=cfg.suffix_max_tokens,
                blocked=self.memory.image_token_ids,
            )
            if chain:
                conf = (
                    self.calibration.rate(Calibration.SUFFIX, SUFFIX_PRIOR) if cfg.calibrate else SUFFIX_PRIOR
                )
                add_chain(
                    tree,
                    chain,
                    max_new=min(cfg.suffix_max_tokens, self.budget),
                    max_depth=cfg.max_depth,
                    confidence=conf,
                    cost=self.cost,
                )
        self.last_stop = best_first(
            tree,
            seq,
            self.lookup,
            budget=self.budget,
            max_depth=cfg.max_depth,
            max_children=cfg.max_children,
            depth_discount=cfg.depth_discount,
            rate=self.rate if cfg.calibrate else None,
            cost=self.cost,
        )
        return laid_out(tree)

    def learn(self, tree: DraftTree, picked: Sequence[int], drawn: frozenset[int]) -> None:
        """Every drafted node whose parent's pick is a sample (``drawn``) is a calibration sample:
        was its token the target's pick at its parent?"""
        if not self.config.calibrate:
            return
        nodes = [i for i in range(1, len(tree)) if tree.parents[i] in drawn]
        sources = [tree.sources[i] for i in nodes]
        token, context, suffix = Calibration.TOKEN, Calibration.CONTEXT, Calibration.SUFFIX
        self.calibration.update(
            [(token if src[0][0] == "m1" else context) if src else suffix for src in sources],
            [tree.fused[i] if src else SUFFIX_PRIOR for i, src in zip(nodes, sources)],
            [picked[tree.parents[i]] == tree.tokens[i] for i in nodes],
        )


class TokenRecycling(Recycling):
    """Token Recycling: the static template filled from M1 rows."""

    def __init__(self, memory: RequestMemory, config: RecapConfig, budget: int) -> None:
        super().__init__(memory, budget)
        memory.use_context = False
        self.template = static_template(budget, config.max_depth, memory.k)

    def draft(self, state: DraftState) -> DraftTree:
        tree = DraftTree.root(state.seq[-1])
        where = {0: 0}
        for t_idx, (t_parent, rank) in enumerate(self.template, start=1):
            parent = where.get(t_parent)
            if parent is None:
                continue
            entry = self.memory.m1.lookup(tree.tokens[parent])
            if entry is None or rank >= len(entry.ids) or entry.probs[rank] <= 0:
                continue
            tok = entry.ids[rank]
            if tree.child(parent, tok) is not None:
                continue
            p = entry.normalised()[rank]
            where[t_idx] = tree.add(
                parent,
                tok,
                score=tree.scores[parent] * p,
                fused=p,
                sources=(("m1", 1.0, entry),),
                origin="m1",
            )
        return tree
