"""Who proposes the candidate tree: the tree data type and its best-first growth, suffix-matched
continuations, the pass-cost model, and one module per drafter. Imports ``recap.core`` and
``recap.memory``."""
