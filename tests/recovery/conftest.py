"""The outages test_receiver_outage runs: ``--outage-seconds`` (CI runs the default, 30)."""

from __future__ import annotations

import pytest


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``outage_seconds`` with each outage the option lists."""
    if "outage_seconds" in metafunc.fixturenames:
        text = str(metafunc.config.getoption("--outage-seconds"))
        outages = [float(part) for part in text.split(",") if part.strip()]
        metafunc.parametrize("outage_seconds", outages, ids=[f"{o:g}s" for o in outages])
