"""Presenters: a trace -> the figures and text the tabs show. Pure functions: no Gradio, no model.

``tree`` (the step's tree), ``tree_geometry`` (its layout), ``charts`` (the run's charts),
``play`` (the animated tree), ``fusion`` (a node's fusion), ``provenance`` (the rows behind
it), ``mask`` (the tree attention mask), ``sampling`` (acceptance under sampling),
``sampling_curve`` (the How it works curve), ``text`` (output text, status, error sentences).
They read traces (``recap.trace``), never the engine, and may
import ``app.state`` and ``app.boundary.errors`` only.
"""
