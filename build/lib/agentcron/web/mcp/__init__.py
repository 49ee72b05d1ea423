"""agentcron as an MCP server: agents list, create and watch their own schedules.

One tool set (``tools``: what each tool is, its schemas and the REST call it makes; ``server``:
the MCP server that answers with it) is served two ways. ``agentcron mcp`` (``web.cli.mcp``)
speaks MCP on stdio and calls a running service over HTTP with ``AGENTCRON_URL`` and
``AGENTCRON_KEY``; the service itself serves the streamable-HTTP transport at ``/mcp``
(``endpoint``), where each tool calls the app in-process with the caller's own key. Either way
a tool call is one request to the REST API, so its validation, its errors and its owner
isolation are the API's, unchanged.

Nothing is imported here: ``agentcron mcp`` must not load the service's side (``endpoint``).
"""
