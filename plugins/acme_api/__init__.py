"""Second example plugin: a partner's orders API polled by the driver, resuming from its cursor.

``STREAMLING__PLUGIN__PATH=plugins/acme_api``; ``demo_server.py`` is a local stand-in for the partner's API.
"""

from streamling.plugin import Plugin

from .source import OrdersSource

PLUGIN = Plugin(namespace="acme_api", operators={"orders_source": OrdersSource})
