"""The tool gateway's client."""
