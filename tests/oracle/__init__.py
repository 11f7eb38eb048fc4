"""The readable reference of drafting and of the memory update: plain Python over ``Entry`` objects
and dicts, written as the specification (DESIGN.md sections 2-5), with no performance tricks. Not
part of ``recap``: the differential tests (``test_kernels.py``, ``test_tree_search.py``) check that
the kernels in ``recap.drafting`` / ``recap.memory`` draft the same trees and leave the same rows.
"""
