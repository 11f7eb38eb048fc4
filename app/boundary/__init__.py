"""The boundary: what a visitor may send and what they read back when it goes wrong.

``errors`` (``UserError``, redaction; no Gradio), ``validation`` (types of what arrives; no
Gradio), ``jobs`` (a visitor's long-job gate; no Gradio) and ``guard`` (every handler's errors as
one ``gr.Error`` sentence, and ``long_job``, the one handler of every long job). Imports no other
layer of the app.
"""
