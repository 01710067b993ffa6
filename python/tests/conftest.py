"""conftest.py - the meganeura package from this checkout, paths of the
repository, and the Vulkan rule of the C tests: without a Vulkan device a
Vulkan test is skipped, unless MN_REQUIRE_VULKAN=1 (`make test`) makes that a
failure."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import meganeura as mn  # noqa: E402


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def vulkan_device():
    try:
        dev = mn.Device("vulkan")
    except mn.Error as e:
        if os.environ.get("MN_REQUIRE_VULKAN") == "1":
            pytest.fail("no Vulkan device and MN_REQUIRE_VULKAN=1: %s" % e)
        pytest.skip("no Vulkan device: %s" % e)
    yield dev
    dev.close()
