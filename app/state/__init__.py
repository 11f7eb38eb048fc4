"""State: what the app keeps and where it comes from. No Gradio.

``settings`` (the deployment), ``session`` (one visitor: ``memories``, ``runs``, ``files``),
``targets`` (the loaded models, shared), ``decoding`` (model access and the one decode loop),
``requests`` (a request checked against the deployment's ceilings), ``example`` (the shipped
run a new page opens on), ``trace_files`` (trace downloads and uploads), ``steps`` and
``aliasing`` (queries over a trace the session keeps). May import ``app.boundary`` only.
"""
