"""OpenClaw-RL: train on every agent turn, judged from what followed it (``openclaw-rl``)."""
