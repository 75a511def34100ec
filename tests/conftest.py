from __future__ import annotations

import pytest

pytest_plugins = ["memq.testing"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The longest tests first, so that the workers of `pytest -n` (make test) do not end
    # with one of them running alone; the order within each group stays as written.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
