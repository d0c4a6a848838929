"""llama-server compatibility: its options (what modelrouter does with each: flags), the
command line and environment of ``serve`` (cli, router_args), and how a model's options
merge and translate into worker parameters (options). See docs/llama-cpp-compat.md."""

from __future__ import annotations

__all__: list[str] = []
