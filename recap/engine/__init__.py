"""The top layer: the decode loop (``loop``) and its verbs (``steps``) over one decode state
(``state``), and the measured node budget (``autobudget``), which times those same verbs."""
