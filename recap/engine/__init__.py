"""The top layer: the decode loop (``loop``) over the layers below, and the measured node budget
(``autobudget``)."""
