"""agentcron core: everything that is true without HTTP."""
