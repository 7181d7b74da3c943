"""console package."""

from data.views import PROVIDERS

# The statistics layer defines the store's views (stats/metrics/views.py); every store the console
# opens has them, stored or shadowed (data/views.py). A module name: imported when a store opens.
if "stats.metrics.views" not in PROVIDERS:
    PROVIDERS.append("stats.metrics.views")
