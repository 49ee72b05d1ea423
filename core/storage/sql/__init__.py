"""Every statement of agentcron, named, by noun."""
