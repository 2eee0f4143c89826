"""The adapter's HTTP fixtures: the app in process over a fake service, with and without auth,
and a second live adapter with auth, a calibration temperature and a Retry-After."""

from __future__ import annotations

import pytest

from launcher import running_adapter

API_KEY = "test-key-4f1c9a"
CALIBRATION_TEMPERATURE = 2.0
RETRY_AFTER_S = 3  # not the default (1), so a test can tell the setting is used


@pytest.fixture(scope="session")
def secured_adapter(tmp_path_factory):
    """A second live adapter with bearer auth on, a calibration temperature and a Retry-After."""
    with running_adapter(
        tmp_path_factory.mktemp("secured"),
        DECISION_API_KEY=API_KEY,
        DECISION_CALIBRATION_TEMPERATURE=str(CALIBRATION_TEMPERATURE),
        DECISION_RETRY_AFTER_S=str(RETRY_AFTER_S),
    ) as running:
        yield running


@pytest.fixture(scope="session")
def in_process():
    """The app in process over a fake service: for tests of routing, errors and limits."""
    from tests.support.fake_service import (
        app_client,
    )  # the web stack: not imported by runs without it

    with app_client() as client:
        yield client


@pytest.fixture(scope="session")
def secured_in_process():
    """The same with bearer auth on."""
    from tests.support.fake_service import app_client

    with app_client(api_key=API_KEY) as client:
        yield client
