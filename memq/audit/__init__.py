"""Audit: producers and consumers report blocks; the auditor proves nothing was lost.

- :mod:`memq.formats.audit`: the audit record format;
- :mod:`memq.audit.emitter` / :mod:`memq.audit.client`: emission from clients;
- :mod:`memq.audit.store` / :mod:`memq.audit.figures`: the SQLite state and its figures;
- :mod:`memq.audit.service`: the auditor of ``memq audit serve``, composed of
  :mod:`memq.audit.ingest` (audit topic -> store), :mod:`memq.audit.api` (JSON API,
  dashboard) and :mod:`memq.audit.metrics`; :mod:`memq.run.auditor` runs it.
"""
