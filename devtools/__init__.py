"""Development tools, never shipped in the wheel: the fake Hugging Face Hub (hub_server, hub_repos, hub_faults,
hub_control, hub_payloads), the tiny GGUF writer, the service-process helper and `make demo`.

Imported from a repo checkout only (tests, benches, `python -m devtools.demo` from the repo root)."""
