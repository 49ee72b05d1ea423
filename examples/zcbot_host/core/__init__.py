"""zcbot's own ``core`` package: its agent and settings. agentcron installs only ``agentcron``,
so this name stays the host's."""
