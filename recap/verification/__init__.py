"""Checking a tree against the target: the tree attention mask, the verify pass, the acceptance
rules and the generation-config processing, and the host copy of the predictions. Imports
``recap.core`` and ``recap.drafting`` (for the tree type)."""
