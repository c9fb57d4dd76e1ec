"""One Ray instance for the whole test session, on loopback only (the fixture `ray_session`, from tests/conftest.py).

The first test that asks for ``ray_session`` moves the test process's main thread into a private
network namespace whose only interface is ``lo`` (see :mod:`longhorizon.engine.ray_loopback`; it
needs root, as on the CI and developer machines) and starts Ray there, with usage statistics and the
dashboard off. Ray's processes inherit the namespace, so nothing outside this machine can reach
them. Tests that run later in the same session stay in that namespace (they need no network). At
the end of the session ``ray.shutdown()`` stops the instance; nothing else is killed.

Without root the Ray tests are skipped with the reason; run them as
``unshare -rn sh -c 'ip link set lo up && pytest tests/engine'``.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray")
    from longhorizon.engine.ray_loopback import enter_loopback_namespace

    try:
        enter_loopback_namespace()
    except PermissionError as error:
        pytest.skip(f"Ray tests need a loopback-only network namespace: {error.strerror}")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(address="local", num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
