"""The tabs: Gradio layout and handlers, one module (or package) per tab; ``app.ui`` puts them in one page.

May import every layer below (``app.widgets``, ``app.presenters``, ``app.state``, ``app.boundary``);
nothing below imports a tab. A tab's long jobs go through ``app.boundary.guard.long_job``.
"""
