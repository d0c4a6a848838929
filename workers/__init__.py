"""Worker processes spawned by the service: ``workers.download`` (one per download job) and ``workers.inference``."""
