"""What a run writes to disk: the checkpoint pool, crash-safe JSON files and the metric logs."""
