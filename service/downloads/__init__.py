"""Downloads on the service side: resolving model names to files (resolution) and the HF cache layout."""
