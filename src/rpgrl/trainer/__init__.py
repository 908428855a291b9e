"""The trainer: supervised warm start (`sft`), the RL loop (`loop`), reference updates, checkpoints, logging."""
