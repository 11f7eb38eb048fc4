"""The trace: the JSON record of a decode that every view of the app reads.

``fields``  what each trace field may hold (annotated types, limits, the identifier rule)
``format``  the records (DecodeTrace, TraceStep, TraceNode, SourceInfo), JSON in and out, checks
``record``  how one decode step becomes a TraceStep (texts, origins, per-source details)
"""
