"""Compare's reduced-precision check: in bf16 / fp16 a method whose tokens differ from the reference's is
either a tie (lossless within the dtype's rounding) or an error, and the badge says which.

``recap.verification.ties.compare_with_reference`` decides it: each emitted token teacher-forced through
generate()'s own passes, within the dtype's tie tolerance ("bf16 tie at token 27: top-2 gap 0.0039,
tolerance 0.0052"). In fp32, and under sampling (a sampled output matches under its seed or not at all),
there is nothing to check: a difference stays the error the badge reports.
"""

from __future__ import annotations

from typing import Any

import torch

from ..state.runs import Run
from ..state.targets import LoadedModel

#: What a method's comparison says: (lossless, the sentence: "" when the tokens are identical).
Verdict = tuple[bool, str]


def precision_verdicts(model: LoadedModel, image: Any, prompt: str, runs: dict[str, Run],
                       reference: str) -> dict[str, Verdict]:
    """Per method whose tokens differ from ``reference``'s: its verdict, checked under the model's lock
    (the check runs the target's passes); {} when nothing differs, in fp32, or under sampling."""
    ref = runs[reference].trace
    differ = {m: r for m, r in runs.items() if r.trace.token_ids != ref.token_ids}
    if not differ or ref.sampling is not None or model.target.dtype in (torch.float32, torch.float64):
        return {}
    from recap.models.inputs import prepare_inputs
    from recap.verification.ties import compare_with_reference

    out: dict[str, Verdict] = {}
    with model.lock:
        inputs = prepare_inputs(model.target, image, prompt)
        for method, run in differ.items():
            out[method] = compare_with_reference(model.target, inputs, run.trace.token_ids, ref.token_ids)
    return out
