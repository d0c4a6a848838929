"""The thin HTTP API: handlers decide nothing, they call the core and append. The app itself is
:func:`service.app.create_app`."""
