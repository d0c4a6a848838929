"""service/devtools package."""
