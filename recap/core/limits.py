"""Ceilings shared by several layers (a prompt is checked where it is typed, decoded and saved)."""

#: Longest prompt, in characters, that a request, a trace or a memory file may hold.
MAX_PROMPT_CHARS = 4000
