"""The sampling acceptance rule: ``generate(do_sample=True)`` verified on a tree, draw by draw.

At a node, the target's next token is a draw from the distribution ``generate()`` draws from
there: the generation config's processors on the node's own context (``GreedyRule``'s
processing, ``recap.verification.acceptance``), then its warpers (temperature, top-h, top-k,
top-p, min-p, typical-p, epsilon and eta cutoffs: transformers' own classes, in generate()'s
order, ``recap.verification.generation_config.sampling_warpers``), then ``renormalize_logits``,
then a softmax. The walk starts at the root: when the draw is a drafted child's token it
continues into that child and draws again there; otherwise the draw is the bonus token and
the step ends (as it does at an EOS id or at ``max_new_tokens``). Every emitted token is thus
a draw from the model's distribution after the exact prefix before it, so the output is
distributed as generate(do_sample=True)'s whatever the drafter proposed, and a drafted child
is accepted with exactly its processed probability at its parent
(``acceptance_probabilities``, which the trace records).

Same seed, same tokens. generate() makes one ``torch.multinomial(probs, num_samples=1)`` per
emitted token, over float32 probabilities of shape (1, V) (the shape decides how much of the
generator's stream a draw consumes). The rule makes the same call, with the same shape and
dtype, in the same order, and only at the nodes the walk reaches: a draw at a node the walk
never reaches would move the generator. With ``generator`` None it draws from torch's default
generator, so ``torch.manual_seed(s)`` before either call gives the same tokens on a CPU in
float32. On a GPU in bf16 a tree's logits can differ from the sequential ones in the last
bits, which can move a draw near a tie: the distribution still holds, token identity is
measured (``scripts/device_check.sh``). A private generator (``recap.generate(seed=...)``)
gives a reproducible run that leaves the global state alone.

``pick`` returns the draw at every node the walk reached and, at the others, the processed
argmax (their mode: no draw was made there), which is what the drafters learn from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from recap.drafting.tree import DraftTree
from recap.verification.acceptance import (
    Accepted,
    GreedyRule,
    History,
    SamplingSettings,
    TreeShape,
    target_scores,
)

#: A transformers logits warper: (input_ids, scores (M, V)) -> new scores (M, V), row by row.
Warper = Callable[[Any, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, eq=False)
class SamplingRule:
    """generate(do_sample=True) under a generation config: see the module docstring.

    ``processing`` holds the processors that run before the warpers (its ``renormalize`` is
    off: under sampling the renormalisation comes after the warpers), the EOS ids and the
    lengths; ``generator`` is the one draws come from (None: torch's default generator).
    """

    processing: GreedyRule
    warpers: tuple[Warper, ...]
    renormalize: bool
    sampling: SamplingSettings
    generator: torch.Generator | None = None

    @property
    def eos(self) -> frozenset[int]:
        return self.processing.eos

    @property
    def needs_context(self) -> bool:
        return self.processing.needs_context

    def distribution(self, scores: torch.Tensor) -> torch.Tensor:
        """Processed float32 scores (M, V) -> the probabilities generate() draws from (M, V).

        The warpers are transformers' own and work row by row (none reads the ids), so a
        row's probabilities do not depend on the other rows.
        """
        for warp in self.warpers:
            scores = warp(None, scores)
        if self.renormalize:
            scores = scores.log_softmax(dim=-1)  # LogitNormalization, generate()'s last processor
        return torch.nn.functional.softmax(scores, dim=-1)

    def pick(self, logits: torch.Tensor, history: History, tree: TreeShape) -> torch.Tensor:
        """Draw along the walk from the root (one draw per emitted token); the mode elsewhere."""
        rule = self.processing
        scores = target_scores(rule, logits, history, tree.tokens, tree.parents, tree.depths)  # (N, V)
        picked = scores.argmax(-1)  # (N,): replaced by the draws along the walk
        child = {(p, t): i for i, (p, t) in enumerate(zip(tree.parents, tree.tokens))}
        left = rule.max_length - history.length  # tokens still to emit in this request
        node = 0
        while True:
            # (1, V) float32, a fresh copy: what generate() draws from after this node's context
            row = scores[node : node + 1].to(dtype=torch.float32, copy=True)
            token = int(torch.multinomial(self.distribution(row), num_samples=1, generator=self.generator))
            picked[node] = token
            left -= 1
            nxt = child.get((node, token))
            if nxt is None or left <= 0 or token in rule.eos:  # the bonus token, or a stop: no more draws
                return picked
            node = nxt

    def accept(self, tree: DraftTree, picked: Sequence[int], produced: int) -> Accepted:
        """The walk the draws took (``GreedyRule.accept`` over the picks: the same cut at a stop)."""
        return self.processing.accept(tree, picked, produced)

    def acceptance_probabilities(
        self, logits: torch.Tensor, history: History, tree: TreeShape
    ) -> list[float]:
        """Per node, the probability that the draw at its parent is its token (the root: 1).

        Every parent's distribution in one batch (the trace's numbers; the draws themselves
        come from ``pick``). Costs one more processing of the parents' rows.
        """
        parents = sorted(set(tree.parents[1:]))
        if not parents:
            return [1.0]
        rows = torch.tensor(parents, device=logits.device)
        scores = target_scores(self.processing, logits, history, tree.tokens, tree.parents, tree.depths)
        probs = self.distribution(scores.index_select(0, rows).float())  # (M, V)
        where = {p: j for j, p in enumerate(parents)}
        at = torch.tensor([where[p] for p in tree.parents[1:]], device=logits.device)
        tokens = torch.tensor(tree.tokens[1:], device=logits.device)
        return [1.0, *probs[at, tokens].tolist()]
