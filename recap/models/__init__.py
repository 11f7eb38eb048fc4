"""The target: one adapter per model family (``families``: contract, registry, one module
each), loading a checkpoint as its files ship, building inputs, processors and token texts.
Imports ``recap.core`` only."""
