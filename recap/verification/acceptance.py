"""The acceptance rule: which token the target emits after every tree node, and what is kept.

Every node of a verified tree is a context of its own: the request's tokens so far (prompt,
image placeholders included, and everything generated) followed by the node's root-to-node
path. An acceptance rule is an object with three methods (the contract the engine relies on):

    pick(logits, history, tree) -> Tensor (N,) int64, on the logits' device
        per node, the token the target emits after that node's context, from the raw
        logits (N, V) of one tree pass: a rule processes them into the distribution
        ``generate()`` would draw from there and picks from it. The engine copies the picks
        to the host (``recap.verification.hostcopy``), in the same sync as the memories' top-k.
    accept(tree, picked, produced) -> Accepted
        walk from the root while a child carries the picked token (``accept_path``): the
        accepted path, and the bonus token (the pick at its last node); emit the path's
        tokens and the bonus, cut at a stop (``cut_at_stop``) after ``produced`` tokens.
    acceptance_probabilities(logits, history, tree) -> list[float] | None
        per node, the probability that the target's pick at its parent is the node's token
        (the root: 1), for the trace; None where picks are not draws (greedy decoding).

and three attributes: ``eos`` (ids that end the output), ``needs_context`` (whether ``pick``
reads the nodes' token ids: the history then keeps them) and ``sampling`` (the
``SamplingSettings`` a sampling rule draws with; None: greedy).

``GreedyRule`` is ``generate()``'s greedy decoding under a generation config, whose pick is
the argmax of the processed scores; ``recap.verification.sampling.SamplingRule`` is
``generate(do_sample=True)``'s, whose picks are draws made along the walk. The walk is the
same for both: a drafted child is kept exactly when the target's own pick carries its token.
``recap.verification.generation_config.acceptance_rule`` resolves a config into one of them.

Processing (``target_scores``) applies every logits processor of the config to all nodes at
once. Each mirrors its transformers ``LogitsProcessor`` (same operations, same order, float32
scores), batched over nodes instead of over sequences; the per-node context is one
right-aligned (N, L) id matrix, so a step costs one gather / scatter per processor, never a
Python loop per node. With nothing to apply (``rule.active`` False) the raw logits are picked
from: no extra work. The memories always learn the raw predictions; only acceptance is processed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Protocol

import torch

from recap.drafting.tree import DraftTree


class TreeShape(Protocol):
    """What a rule reads of a tree: its nodes' tokens, parents and depths (a ``DraftTree``)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]


@dataclass(slots=True)
class Accepted:
    """What one verification keeps."""

    path: list[int]  # the accepted nodes from the root (the whole walk)
    bonus: int  # the pick at the path's last node
    emitted: list[int]  # tokens added to the output: the path's after the root, then the bonus, cut at a stop
    stop_reason: str  # "" while running, then "eos" or "max_new_tokens"

    @property
    def shown(self) -> list[int]:
        """The path trimmed to what was emitted (a stop inside the path cuts it there)."""
        return self.path[: len(self.emitted) + 1] if len(self.emitted) < len(self.path) else self.path


@dataclass(frozen=True)
class SamplingSettings:
    """What a sampling rule draws with, as generate() resolved it (None: that warper is off)."""

    temperature: float
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    epsilon_cutoff: float | None = None
    eta_cutoff: float | None = None
    top_h: float | None = None
    seed: int | None = None  # the private generator's seed; None: torch's default generator


class AcceptanceRule(Protocol):
    """See the module docstring."""

    @property
    def eos(self) -> frozenset[int]: ...

    @property
    def needs_context(self) -> bool: ...

    @property
    def sampling(self) -> SamplingSettings | None: ...

    def pick(self, logits: torch.Tensor, history: History, tree: TreeShape) -> torch.Tensor: ...

    def accept(self, tree: DraftTree, picked: Sequence[int], produced: int) -> Accepted: ...

    def acceptance_probabilities(
        self, logits: torch.Tensor, history: History, tree: TreeShape
    ) -> list[float] | None: ...


@dataclass(frozen=True)
class SequenceBias:
    """Prepared ``sequence_bias`` / ``bad_words_ids`` (SequenceBiasLogitsProcessor's layout).

    single: (V,) float32 bias of one-token sequences (None: there are none).
    groups: per prefix length m - 1, in first-seen order: prefixes (B, m - 1), last tokens
    (B,), biases (B,) float32.
    """

    single: torch.Tensor | None
    groups: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]


@dataclass(frozen=True)
class GreedyRule:
    """What generate() does to a node's logits before its argmax, and when it stops.

    Lengths below count a node's whole context, prompt included (transformers'
    ``input_ids.shape[-1]``): the prompt, the tokens generated so far and the node's own
    root-to-node path.
    """

    eos: frozenset[int]
    prompt_len: int
    max_length: int  # prompt_len + max_new_tokens
    sequence_bias: SequenceBias | None = None
    repetition_penalty: float | None = None
    no_repeat_ngram_size: int = 0
    bad_words: SequenceBias | None = None
    min_length: int = 0  # EOS is banned while the context is shorter than this
    eos_mask: torch.Tensor | None = None  # (V,) bool
    forced_bos: tuple[int, ...] = ()  # forced when the context is 1 token long
    forced_eos: tuple[int, ...] = ()  # forced when the context is max_length - 1 long
    remove_invalid_values: bool = False
    suppress: torch.Tensor | None = None  # (V,) bool, always banned
    begin_suppress: torch.Tensor | None = None  # (V,) bool, banned when the context is begin_index long
    begin_index: int = 0
    renormalize: bool = False
    sampling: ClassVar[SamplingSettings | None] = None  # greedy: no draws

    @cached_property
    def needs_context(self) -> bool:
        """Whether some processor reads the nodes' token ids (not only their lengths)."""
        return bool(self.sequence_bias or self.repetition_penalty is not None or self.no_repeat_ngram_size
                    or self.bad_words)

    @cached_property
    def active(self) -> bool:
        """Whether any processor can change an argmax (False: take the raw argmax, no extra work)."""
        return bool(
            self.needs_context or (self.min_length > self.prompt_len and self.eos_mask is not None)
            or self.forced_bos or self.forced_eos or self.remove_invalid_values or self.suppress is not None
            or self.begin_suppress is not None or self.renormalize
        )

    def pick(self, logits: torch.Tensor, history: History, tree: TreeShape) -> torch.Tensor:
        """The processed argmax at every node: logits (N, V) -> (N,)."""
        return target_scores(self, logits, history, tree.tokens, tree.parents, tree.depths).argmax(-1)

    def accept(self, tree: DraftTree, picked: Sequence[int], produced: int) -> Accepted:
        """Follow the picks from the root; emit at most ``max_length - prompt_len`` tokens in all."""
        path, bonus = accept_path(tree, picked)
        emitted, stop = cut_at_stop(
            [tree.tokens[i] for i in path[1:]] + [bonus], produced, self.max_length - self.prompt_len,
            self.eos,
        )
        return Accepted(path, bonus, emitted, stop)

    def acceptance_probabilities(self, logits: torch.Tensor, history: History, tree: TreeShape) -> None:
        """None: a greedy pick is not a draw."""
        return None


PAD = -1  # marks "no token" in a context matrix; never equals a real id


class History:
    """The request's tokens so far (prompt + generated; the last one is the next root).

    Kept as a device tensor only when the rule reads token ids (``keep_ids``); otherwise
    only its length is tracked.
    """

    def __init__(self, ids: Sequence[int], device: torch.device, *, keep_ids: bool) -> None:
        self.length = len(ids)
        self.ids = torch.tensor(list(ids), dtype=torch.long, device=device) if keep_ids else None  # (S,)

    def extend(self, tokens: Sequence[int]) -> None:
        self.length += len(tokens)
        if self.ids is not None and tokens:
            new = torch.tensor(list(tokens), dtype=torch.long, device=self.ids.device)
            self.ids = torch.cat([self.ids, new])


# --------------------------------------------------------------------------- node contexts


def node_lengths(history_len: int, depths: Sequence[int], device: torch.device) -> torch.Tensor:
    """(N,) context length at every node: history + depth (the root is the history's last token)."""
    return torch.tensor(depths, device=device) + history_len


def node_context(
    history: torch.Tensor, tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int]
) -> torch.Tensor:
    """Right-aligned context ids of every node: (N, S + D), ``PAD`` on the left.

    Row i is [PAD] * (D - depth_i) + history + path_i, where path_i is node i's root-to-node
    path without the root (the root already ends the history) and D the tree's depth.
    Right alignment puts every row's last n tokens in the same columns, as n-gram and
    sequence matching need.
    """
    n, s = len(tokens), history.shape[0]
    d = max(depths)
    if d == 0:
        return history.view(1, s).expand(n, s)
    paths: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):  # parents precede children
        paths[i] = [*paths[parents[i]], tokens[i]]
    device = history.device
    path = torch.tensor([p + [PAD] * (d - len(p)) for p in paths], dtype=torch.long, device=device)  # (N, D)
    left = torch.cat([history.view(1, s).expand(n, s), path], dim=1)  # (N, S + D), padded on the right
    shift = d - torch.tensor(depths, device=device)  # (N,)
    src = torch.arange(s + d, device=device).view(1, -1) - shift.view(-1, 1)  # (N, S + D)
    return left.gather(1, src.clamp(min=0)).masked_fill(src < 0, PAD)


# --------------------------------------------------------------------------- processors
# Each takes float32 scores (N, V) and returns new ones; none writes into its input (which
# may be the raw logits themselves).


def apply_sequence_bias(scores: torch.Tensor, context: torch.Tensor, bias: SequenceBias) -> torch.Tensor:
    """SequenceBiasLogitsProcessor (and NoBadWordsLogitsProcessor, whose biases are -inf)."""
    add = torch.zeros_like(scores)  # (N, V)
    if bias.single is not None:
        add += bias.single
    width = context.shape[1]
    for prefixes, last, values in bias.groups:  # one comparison per prefix length
        m = prefixes.shape[1]
        if m > width:
            continue
        match = (context[:, None, -m:] == prefixes).all(dim=-1)  # (N, B); PAD never matches
        add.index_add_(1, last, torch.where(match, values, 0.0).to(add.dtype))
    return scores + add


def apply_repetition_penalty(scores: torch.Tensor, context: torch.Tensor, penalty: float) -> torch.Tensor:
    """RepetitionPenaltyLogitsProcessor: every token in the node's context, prompt included."""
    n, vocab = scores.shape
    ids = context.masked_fill(context < 0, vocab).clamp(max=vocab)  # PAD and out-of-vocab ids -> spare column
    padded = scores.new_empty(n, vocab + 1)  # (N, V + 1); a fresh copy (F.pad is ~10x slower on CPU)
    padded[:, :vocab] = scores
    padded[:, vocab] = 0.0
    picked = padded.gather(1, ids)  # (N, L)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return padded.scatter_(1, ids, picked)[:, :vocab]


def apply_no_repeat_ngram(
    scores: torch.Tensor, context: torch.Tensor, lengths: torch.Tensor, n: int
) -> torch.Tensor:
    """NoRepeatNGramLogitsProcessor: ban every token that would repeat an n-gram of the context."""
    width, vocab = context.shape[1], scores.shape[-1]
    if width < n:
        return scores
    prefix = context[:, width + 1 - n :]  # (N, n - 1): each node's last n - 1 tokens
    windows = context.unfold(1, n, 1)  # (N, W, n)
    match = (windows[..., :-1] == prefix.unsqueeze(1)).all(dim=-1)  # (N, W)
    match &= (windows[..., -1] >= 0) & (lengths >= n).view(-1, 1)  # no PAD windows, short contexts ban none
    banned = torch.zeros(scores.shape[0], vocab + 1, dtype=torch.bool, device=scores.device)
    banned.scatter_(1, torch.where(match, windows[..., -1].clamp(max=vocab), vocab), True)
    return torch.where(banned[:, :vocab], -math.inf, scores)  # = masked_fill, in one pass


def apply_forced(scores: torch.Tensor, rows: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """ForcedBOS / ForcedEOSTokenLogitsProcessor at the nodes where ``rows`` (N,) is True."""
    forced = torch.full_like(scores, -math.inf)
    forced[:, list(ids)] = 0
    return torch.where(rows.view(-1, 1), forced, scores)


def apply_remove_invalid(scores: torch.Tensor) -> torch.Tensor:
    """InfNanRemoveLogitsProcessor."""
    info = torch.finfo(scores.dtype)
    out = torch.where(scores != scores, 0.0, scores)
    out = torch.where(scores == math.inf, info.max, out)
    return torch.where(scores == -math.inf, info.min, out)


def process_logits(
    rule: GreedyRule, logits: torch.Tensor, lengths: torch.Tensor, context: torch.Tensor | None
) -> torch.Tensor:
    """logits (N, V) -> the scores generate() takes its argmax of, float32 (N, V).

    lengths (N,): every node's context length; context (N, L): right-aligned ids
    (``node_context``; needed when ``rule.needs_context``). Order as in transformers'
    ``_get_logits_processor``.
    """
    scores = logits.float()  # generate() processes float32 copies of the logits
    if rule.sequence_bias is not None:
        scores = apply_sequence_bias(scores, context, rule.sequence_bias)
    if rule.repetition_penalty is not None:
        scores = apply_repetition_penalty(scores, context, rule.repetition_penalty)
    if rule.no_repeat_ngram_size:
        scores = apply_no_repeat_ngram(scores, context, lengths, rule.no_repeat_ngram_size)
    if rule.bad_words is not None:
        scores = apply_sequence_bias(scores, context, rule.bad_words)
    if rule.eos_mask is not None and rule.min_length > rule.prompt_len:
        short = (lengths < rule.min_length).view(-1, 1)  # (N, 1)
        scores = torch.where(short & rule.eos_mask, -math.inf, scores)
    if rule.forced_bos:
        scores = apply_forced(scores, lengths == 1, rule.forced_bos)
    if rule.forced_eos:
        scores = apply_forced(scores, lengths == rule.max_length - 1, rule.forced_eos)
    if rule.remove_invalid_values:
        scores = apply_remove_invalid(scores)
    if rule.suppress is not None:
        scores = torch.where(rule.suppress, -math.inf, scores)
    if rule.begin_suppress is not None:
        first = (lengths == rule.begin_index).view(-1, 1)
        scores = torch.where(first & rule.begin_suppress, -math.inf, scores)
    if rule.renormalize:
        scores = scores.log_softmax(dim=-1)
    return scores


def target_scores(
    rule: GreedyRule,
    logits: torch.Tensor,
    history: History,
    tokens: Sequence[int],
    parents: Sequence[int],
    depths: Sequence[int],
) -> torch.Tensor:
    """The scores generate() would take the argmax of after every node: logits (N, V) -> (N, V).

    With no processor to apply, the raw logits themselves (no copy).
    """
    if not rule.active:
        return logits
    lengths = node_lengths(history.length, depths, logits.device)
    context = None
    if rule.needs_context:
        assert history.ids is not None, "the history keeps ids when the rule needs them"
        context = node_context(history.ids, tokens, parents, depths)
    return process_logits(rule, logits, lengths, context)


# --------------------------------------------------------------------------- accepting


def accept_path(tree: DraftTree, picked: Sequence[int]) -> tuple[list[int], int]:
    """Walk from the root while a child carries the target's pick.

    Returns the accepted node path (starting with the root) and the bonus token (the
    target's pick at the last accepted node).
    """
    path = [0]
    node = 0
    while True:
        nxt = tree.child(node, int(picked[node]))
        if nxt is None:
            return path, int(picked[node])
        path.append(nxt)
        node = nxt


def cut_at_stop(
    new: Sequence[int], produced: int, max_new_tokens: int, eos: frozenset[int]
) -> tuple[list[int], str]:
    """The tokens of ``new`` to emit after ``produced`` ones: up to and including an EOS, at most
    ``max_new_tokens`` in all. Returns them and the stop reason ("" while running)."""
    emitted: list[int] = []
    for tok in new:
        emitted.append(tok)
        if tok in eos:
            return emitted, "eos"
        if produced + len(emitted) >= max_new_tokens:
            return emitted, "max_new_tokens"
    return emitted, ""
