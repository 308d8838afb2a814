"""The leaf data types every layer shares: rollout samples (`samples.py`) and padded training batches (`collate.py`)."""
