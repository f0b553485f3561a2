"""Shared fixtures: small clusters and the path of the shared reference data."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def specs_yaml() -> dict:
    """../shared/reference/specs.yaml, the sourced numbers the catalogue must agree with."""
    import yaml

    path = SHARED / "reference" / "specs.yaml"
    if not path.is_file():
        pytest.skip("../shared/reference/specs.yaml not present")
    return yaml.safe_load(path.read_text())
