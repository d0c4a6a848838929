"""Migration scripts (a package only so that the wheel includes them; Alembic skips this file)."""
