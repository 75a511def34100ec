"""Composition roots: the processes MemQ runs (broker, auditor), wired from their parts.

Roles (broker, governor member, auditor) never import each other or these modules; a
runner builds them and connects them through the small interfaces each role declares
(e.g. :mod:`memq.broker.cluster`). The CLI calls the runners.
"""
