"""Target resolution (pure: injected capabilities and toolchains, no GPU or NVRTC needed)."""

import pytest

from normkit import _C

# What NVRTC 13.0 reports (nvrtcGetSupportedArchs).
NVRTC_13_ARCHS = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]
DRIVER_13_0 = 13000


def resolve(cc, nvrtc=(13, 0), archs=NVRTC_13_ARCHS, driver=DRIVER_13_0):
    return _C.resolve_target(cc[0], cc[1], nvrtc[0], nvrtc[1], archs, driver)


@pytest.mark.parametrize("cc, expected", [
    ((7, 5), "sm_75"),
    ((8, 0), "sm_80"),
    ((8, 6), "sm_86"),
    ((8, 9), "sm_89"),
    ((9, 0), "sm_90a"),
    ((10, 0), "sm_100a"),
    ((12, 0), "sm_120a"),
])
def test_native_cubin_target(cc, expected):
    assert resolve(cc) == expected


def test_device_newer_than_nvrtc_gets_ptx_for_the_newest_known_arch():
    # A Blackwell workstation GPU with an NVRTC that stops at sm_100: PTX, never "a".
    assert resolve((12, 0), nvrtc=(12, 8), archs=[75, 80, 86, 89, 90, 100]) == "compute_100"


def test_device_older_than_nvrtc_supports_is_an_error():
    with pytest.raises(_C.NormkitError):
        resolve((7, 0))


def test_ptx_from_nvrtc_newer_than_driver_is_an_error():
    # The driver could not JIT PTX produced by a newer NVRTC.
    with pytest.raises(_C.NormkitError):
        resolve((12, 0), nvrtc=(13, 0), archs=[75, 80, 90, 100], driver=12080)


@pytest.mark.parametrize("text, expected", [
    ("sm_90a", "sm_90a"),
    ("sm_80", "sm_80"),
    ("compute_90", "compute_90"),
    ("90a", "sm_90a"),
    ("sm_100a", "sm_100a"),
])
def test_parse_target(text, expected):
    assert _C.parse_target(text) == expected


@pytest.mark.parametrize("text", ["", "sm_", "gfx90a", "sm_9x", "compute_90a_extra"])
def test_parse_target_rejects_garbage(text):
    with pytest.raises(_C.NormkitError):
        _C.parse_target(text)
