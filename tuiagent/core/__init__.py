"""The headless core: events, the agent loop, parsing, prompts, trajectories, answer checking."""
