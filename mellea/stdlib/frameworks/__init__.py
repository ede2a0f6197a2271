"""Agent loops built on sessions (upstream's ``mellea.stdlib.frameworks``)."""
