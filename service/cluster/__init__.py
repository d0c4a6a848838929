"""Several services on one PostgreSQL log: membership and liveness (docs/cluster.md)."""
