"""The trace: the JSON record of a decode that every view of the app reads.

``fields``  what each trace field may hold (annotated types, limits, the identifier rule)
``format``  the records (DecodeTrace, TraceStep, TraceNode, SourceInfo, TraceSampling), JSON in and out
``checks``  the structural checks a trace passes when it loads (tree, path, draws)
``record``  how one decode step becomes a TraceStep (texts, origins, per-source details)
``mixture`` the fusion of memory rows, sum_j w_j q_j, as the origins and the node inspector rebuild it
"""
