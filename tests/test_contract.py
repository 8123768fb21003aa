"""The public API keeps the names, arguments and defaults that DESIGN.md promises to users' code."""

import inspect

import pytest

import tfplace

# As DESIGN.md writes them; tfplace may add keyword-only arguments with defaults after them.
PROMISED = {
    "configure": "(*, soft_placement=None, log_placement=None, device_policy=None, memory_growth=None, "
                 "memory_fraction=None, memory_limit_mb=None, visible_gpus=None, logical_cpus=None, "
                 "logical_gpus=None)",
    "cpu": "()",
    "gpu": "(i=0)",
    "num_gpus": "()",
    "try_gpu": "(i=0)",
    "try_all_gpus": "()",
    "device": "(spec, *, fallback=True)",
    "to_device": "(value, device)",
    "devices_of": "(obj)",
    "capture_placement": "(*, sources=False)",
    "transfer_guard": "(level='disallow')",
    "device_guard": "(device, *, allow_ops=())",
    "split_batch": "(x, y, devices)",
    "replicate": "(fn, devices, *args, **kwargs)",
    "reduce_on": "(values, device='/cpu:0', op='sum')",
    "strategy": "(devices=None)",
    "read_profile": "(path)",
    "PlacementLog.devices_for": "(self, op)",
    "PlacementLog.ops_on": "(self, device)",
    "PlacementLog.summary": "(self)",
    "PlacementLog.assert_placed": "(self, op, device)",
    "PlacementLog.assert_not_placed": "(self, op, device)",
    "PlacementLog.guide_lines": "(self)",
    "PlacementLog.from_text": "(text)",
}


def _bare(function) -> inspect.Signature:
    signature = inspect.signature(function)
    return signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                             return_annotation=signature.empty)


@pytest.mark.parametrize("name", PROMISED)
def test_signature_is_as_promised(name):
    found = tfplace
    for part in name.split("."):
        found = getattr(found, part)
    signature = _bare(found)
    promised = PROMISED[name]
    count = len([item for item in promised[1:-1].split(", ") if item not in ("", "*")])
    kept = list(signature.parameters.values())[:count]
    extra = list(signature.parameters.values())[count:]
    assert str(signature.replace(parameters=kept)) == promised, f"tfplace.{name}{signature}"
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extra), f"tfplace.{name}{signature}"


@pytest.mark.parametrize("name", ["Error", "ConfigurationError", "RuntimeInitializedError", "DeviceNotFoundError",
                                  "DeviceSpecError", "ImplicitCopyError", "PlacementError"])
def test_errors_are_exported_with_their_bases(name):
    bases = {"Error": Exception, "ConfigurationError": ValueError, "RuntimeInitializedError": RuntimeError,
             "DeviceNotFoundError": ValueError, "DeviceSpecError": ValueError, "ImplicitCopyError": RuntimeError,
             "PlacementError": RuntimeError}
    error = getattr(tfplace, name)
    assert name in tfplace.__all__ and issubclass(error, tfplace.Error) and issubclass(error, bases[name])
