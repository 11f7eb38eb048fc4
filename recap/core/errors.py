"""The two errors a library user sees when a checkpoint or an input cannot be used.

Both carry a message that names the file (or the input), the key and what to do; raw
exceptions from transformers are wrapped, never passed through.
"""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model or processor that could not be loaded; the message says why."""


class InputError(ValueError):
    """An image or prompt the model cannot take; the message says why."""
