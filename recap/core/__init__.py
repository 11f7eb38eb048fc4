"""The bottom layer: settings (``config``), errors and the JSON schema checker. Imports nothing of recap."""
