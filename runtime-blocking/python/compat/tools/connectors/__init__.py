"""Managed connectors: connection operations run by connop."""
