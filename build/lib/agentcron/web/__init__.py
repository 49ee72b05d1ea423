"""agentcron web: the FastAPI service and the execution loop."""
