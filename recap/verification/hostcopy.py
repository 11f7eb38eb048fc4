"""Moving each pass's predictions to the host: the rule's picks always, the top-k when memories need it.

On a CPU there is nothing to move: the picks are read directly and the top-k is taken
when the update asks for it. On CUDA the engine would otherwise block twice per pass
(``picked.tolist()``, then ``topk.cpu()``). With ``overlap`` (the default on CUDA),
the picks and the top-k are both taken on the device right after the forward, copied
with ``non_blocking=True`` into pinned host buffers reused across passes, and one event
synchronisation waits for both: one blocking point per pass, and the top-k never
round-trips through pageable memory. The same buffered code path runs on a CPU when
``overlap=True`` is asked for (plain buffers, synchronous copies), which is how it is
tested without a GPU.
"""

from __future__ import annotations

import torch


def topk_predictions(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (N, V) -> top-k token ids (N, k) and their softmax probabilities (N, k).

    A softmax, then its top-k: two kernels. (Top-k of the logits and exp(logit -
    logsumexp) avoids the (N, V) softmax but takes four, and on a small model each
    small op costs more than the arithmetic: 20 against 9 us for 25 x 71 on one CPU
    thread.) The memories only draft, so the order of exactly tied probabilities does
    not matter for correctness.
    """
    scores = logits if logits.dtype == torch.float32 else logits.float()  # (a no-op call costs a dispatch)
    top = torch.topk(torch.softmax(scores, dim=-1), k, dim=-1)
    return top.indices, top.values


def scattered_topk(
    logits: torch.Tensor, rows: torch.Tensor, n: int, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of logits (R, V) computed at positions ``rows`` (R,) of n, as (n, k) ids and probabilities
    with zeros at every other position (rows no memory reads: the caller says which).

    The top-k is taken over the R rows at once (so the (R, V) logits can go right after) and
    only the (n, k) result is moved to the host.
    """
    ids = torch.zeros(n, k, dtype=torch.int64, device=logits.device)
    probs = torch.zeros(n, k, dtype=torch.float32, device=logits.device)
    if rows.numel():
        top_ids, top_probs = topk_predictions(logits, k)  # (R, k)
        ids[rows] = top_ids
        probs[rows] = top_probs
    return (ids, probs) if ids.device.type == "cpu" else (ids.cpu(), probs.cpu())


class HostPredictions:
    """One request's device-to-host traffic: ``fetch(picked, raw=logits)`` in verify, ``topk(logits)`` in
    update."""

    def __init__(self, device: torch.device, k: int, *, need_topk: bool, overlap: bool | None = None) -> None:
        self.device = device
        self.k = k
        self.need_topk = need_topk
        self.overlap = device.type == "cuda" if overlap is None else overlap
        self._pinned = self.overlap and device.type == "cuda"
        self._picked: torch.Tensor | None = None  # (rows,) int64 host buffer
        self._ids: torch.Tensor | None = None  # (rows, k) int64
        self._probs: torch.Tensor | None = None  # (rows, k) float32
        self._top: tuple[torch.Tensor, torch.Tensor] | None = None  # this pass's host top-k

    def _buffers(self, n: int) -> None:
        if self._picked is not None and self._picked.shape[0] >= n:
            return
        rows = max(n, 2 * (self._picked.shape[0] if self._picked is not None else 32))
        pin = self._pinned
        self._picked = torch.empty(rows, dtype=torch.int64, pin_memory=pin)
        self._ids = torch.empty(rows, self.k, dtype=torch.int64, pin_memory=pin)
        self._probs = torch.empty(rows, self.k, dtype=torch.float32, pin_memory=pin)

    def fetch(self, picked: torch.Tensor, *, raw: torch.Tensor) -> list[int]:
        """The acceptance rule's picks (N,) on the device, as a host list.

        ``raw``: the unprocessed logits (N, V) the memories' top-k comes from; with
        ``overlap`` it is taken and copied here, in the same sync as the picks.
        """
        self._top = None
        if not self.overlap:
            return picked.tolist()
        n = picked.shape[0]
        self._buffers(n)
        assert self._picked is not None and self._ids is not None and self._probs is not None
        out = self._picked[:n]
        out.copy_(picked, non_blocking=True)
        if self.need_topk:
            ids, probs = topk_predictions(raw, self.k)
            self._ids[:n].copy_(ids, non_blocking=True)
            self._probs[:n].copy_(probs, non_blocking=True)
            self._top = (self._ids[:n], self._probs[:n])
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the one blocking point of the pass
        return out.tolist()

    def topk(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k ids and probabilities (N, k) on the host, for the memories.

        The rows are only valid until the next ``fetch`` call (the buffers are reused):
        the memories convert them to Python values at once.
        """
        if self._top is not None:
            return self._top
        ids, probs = topk_predictions(logits, self.k)
        return (ids, probs) if ids.device.type == "cpu" else (ids.cpu(), probs.cpu())
