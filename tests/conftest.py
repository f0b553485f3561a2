"""Shared fixtures: small clusters and the path of the shared reference data."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"     # copies of the shared reference files tests use


@pytest.fixture(scope="session")
def specs_yaml() -> dict:
    """specs.yaml (a copy of ../shared/reference/specs.yaml), the sourced numbers the catalogue
    must agree with."""
    import yaml

    return yaml.safe_load((DATA / "specs.yaml").read_text())
