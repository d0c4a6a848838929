"""Development tools: the fake Hugging Face Hub (hub_server, hub_repos, hub_faults, hub_control) and test helpers."""
