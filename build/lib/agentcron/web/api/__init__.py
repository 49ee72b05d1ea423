"""HTTP routers, one per resource, and the error table."""
