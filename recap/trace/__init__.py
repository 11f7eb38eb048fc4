"""The trace: the JSON record of a decode that every view of the app reads (``format``), and how
a decode step becomes one (``record``)."""
