"""Audit: producers and consumers report blocks; the auditor proves nothing was lost.

- :mod:`memq.formats.audit`: the audit record format;
- :mod:`memq.audit.emitter` / :mod:`memq.audit.client`: emission from clients;
- :mod:`memq.audit.store`: matching and figures in SQLite;
- :mod:`memq.audit.service`: ``memq audit serve`` (ingest, JSON API, dashboard).
"""
