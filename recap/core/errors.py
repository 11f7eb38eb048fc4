"""The errors a library user sees when a checkpoint, an input or an installed plugin cannot be used.

Each carries a message that names the file (the input, the entry point), the key and what to do; raw
exceptions from transformers are wrapped, never passed through.
"""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model or processor that could not be loaded; the message says why."""


class InputError(ValueError):
    """An image or prompt the model cannot take; the message says why."""


class PluginError(ValueError):
    """An installed drafter plugin (entry point group ``recap.drafters``) that cannot be registered.

    The message names the entry point and its distribution. A ValueError, so the command line
    reports it as it reports an unknown method name.
    """
