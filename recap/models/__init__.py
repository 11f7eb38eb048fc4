"""The target: one adapter per model family, loading a checkpoint as its files ship, building
inputs, processors and token texts. Imports ``recap.core`` only."""
