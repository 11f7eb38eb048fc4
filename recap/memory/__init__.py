"""What is remembered: the 1-token memory and the per-request contextual ones (``store``), the
contextual rows kept per image across a session's requests (``scoped``), their calibration, the
fusion of their rows, and the memory file format. Imports ``recap.core`` only."""
