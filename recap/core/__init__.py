"""The bottom layer; imports nothing of recap.

``config``   RecapConfig, every drafting setting, validated
``errors``   the errors users see (ModelLoadError, InputError)
``limits``   ceilings shared by several layers (prompt length)
``jsontext`` parsing untrusted JSON text (numbers, unicode, nesting) with errors naming the path
``schema``   typed reading of parsed JSON into annotated dataclasses
"""
