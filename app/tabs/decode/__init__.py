"""The Decode tab: ``tab`` (request in, the streamed run out) and ``panels`` (model, memory, trace files)."""
