"""Who proposes the candidate tree: the drafter contract (``protocol``), one module per drafter
(``ar``, ``pld``, ``token_recycling``, ``recap_drafter``) and what the memory drafters share
(``recycling``: their keys and update), the tree data type and its best-first growth, suffix-matched
continuations, and the pass-cost model. Imports ``recap.core`` and ``recap.memory``."""
