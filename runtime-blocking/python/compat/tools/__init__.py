"""The original agent's module layout laid over connop.

Only the modules its connector tests import are here: ``tools.connectors.{contract, live,
operation, tool, managed, run, gateway.client, gateway.errors}``, ``tools.interrupt`` and
(beside this package) ``hermes_constants``. They hold no rule of their own: each reads what a host (or a test) sets on it at call time and hands it to the
``connop`` module, where the core decides everything. How a host uses it:
docs/python.md#for-a-host-that-lays-another-systems-layout-over-connop.
"""
