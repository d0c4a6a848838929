"""The API's controllers, one private module per feature; ``route_handlers`` is the
collection ``create_app`` registers."""

from __future__ import annotations

from service.api.controllers._dashboard import STATIC
from service.api.controllers._downloads import start_download
from service.api.controllers._options import options_handlers
from service.api.controllers._proxy_routes import GET_ROUTES, POST_ROUTES
from service.api.controllers._reload import reload_before_listing
from service.api.controllers._routes import route_handlers

__all__ = [
    "GET_ROUTES",
    "POST_ROUTES",
    "STATIC",
    "options_handlers",
    "reload_before_listing",
    "route_handlers",
    "start_download",
]
