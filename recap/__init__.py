"""RECAP: context-aware prediction recycling for multimodal speculative decoding."""

from recap.processors import register_auto_classes

register_auto_classes()
