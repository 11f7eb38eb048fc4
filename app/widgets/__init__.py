"""Widgets: reusable Gradio components, forms and panels that more than one tab lays out.

Typed output records (``records``), component variants (``components``, ``anim``), the forms
with their checks (``config_form``, ``sampling_form``), the run shown under the Decode and
Compare tabs (``main_view``) and the step's inspector (``step_panel``). May import
``app.presenters``, ``app.state`` and ``app.boundary``; never a tab.
"""
