"""The bottom layer; imports nothing of recap.

``assets``   where the shipped assets are (a checkout's assets/, an installed package's recap/assets)
``config``   RecapConfig, every drafting setting, validated
``errors``   the errors users see (ModelLoadError, InputError, PluginError)
``limits``   ceilings shared by several layers (prompt length)
``jsontext`` parsing untrusted JSON text (numbers, unicode, nesting) with errors naming the path
``schema``   typed reading of parsed JSON into annotated dataclasses
"""
