"""The model sources, as llama.cpp's router reads them: the HF caches, the models dir, preset
files and the ``-hf``/``-m`` model. Reading them (disk, hf_source), the pure decisions over
what was read (cache_models, desired, plan), and the catalogue that applies them at start-up
and on reload (sources)."""

from __future__ import annotations

__all__: list[str] = []
