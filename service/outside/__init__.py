"""The service's real outside: the wall clock and ids, the sockets it listens on, its HTTP client for
hops, and where its own log lines go. Everything else takes these injected, so tests can swap them."""
