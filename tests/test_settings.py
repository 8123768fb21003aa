"""Settings: validation, sources and priority, without TensorFlow."""

import math

import pytest

from tfplace import ConfigurationError
from tfplace.config import _settings


@pytest.mark.parametrize("value", [0, -0.1, 1.5, math.nan, "half", True])
def test_memory_fraction_rejected_with_value_bounds_and_source(value):
    with pytest.raises(ConfigurationError) as err:
        _settings.resolve({"memory_fraction": value}, {}, {})
    message = str(err.value)
    assert f"memory_fraction={value!r}" in message
    assert "(0, 1]" in message
    assert "argument memory_fraction" in message


@pytest.mark.parametrize("value", [0, -2, 1.5, "2"])
def test_logical_cpus_rejected(value):
    with pytest.raises(ConfigurationError, match=r"logical_cpus=.* \(from argument logical_cpus\).*>= 1"):
        _settings.resolve({"logical_cpus": value}, {}, {})


def test_device_policy_bogus_lists_the_allowed_policies():
    with pytest.raises(ConfigurationError, match=r"device_policy='bogus'.*'silent', 'warn', 'explicit'"):
        _settings.resolve({"device_policy": "bogus"}, {}, {})


def test_fraction_and_limit_conflict_names_both_sources():
    with pytest.raises(ConfigurationError) as err:
        _settings.resolve({"memory_limit_mb": 1024}, {}, {"TFPLACE_MEMORY_FRACTION": "0.5"})
    assert "environment variable TFPLACE_MEMORY_FRACTION" in str(err.value)
    assert "argument memory_limit_mb" in str(err.value)


@pytest.mark.parametrize("other", [{"memory_fraction": 0.5}, {"memory_limit_mb": 512}, {"logical_gpus": 2}])
def test_memory_growth_conflicts_with_caps_and_logical_gpus(other):
    with pytest.raises(ConfigurationError, match="memory_growth=True .* cannot be combined"):
        _settings.resolve({"memory_growth": True, **other}, {}, {})


def test_memory_growth_false_combines_with_a_cap():
    chosen = _settings.resolve({"memory_growth": False, "memory_limit_mb": 512}, {}, {})
    assert chosen["memory_limit_mb"].value == 512


@pytest.mark.parametrize("variable,text", [
    ("TFPLACE_MEMORY_FRACTION", "half"),
    ("TFPLACE_LOGICAL_CPUS", "two"),
    ("TFPLACE_SOFT_PLACEMENT", "maybe"),
    ("TF_FORCE_GPU_ALLOW_GROWTH", "yes"),
    ("TFPLACE_VISIBLE_GPUS", "0,x"),
])
def test_unparsable_environment_variable_is_named(variable, text):
    with pytest.raises(ConfigurationError) as err:
        _settings.resolve({}, {}, {variable: text})
    assert f"{variable}={text!r}" in str(err.value)
    assert f"environment variable {variable}" in str(err.value)


def test_priority_environment_then_flags_then_arguments():
    env = {"TFPLACE_LOGICAL_CPUS": "2", "TFPLACE_DEVICE_POLICY": "warn", "TFPLACE_SOFT_PLACEMENT": "off"}
    chosen = _settings.resolve({"logical_cpus": 4}, {"logical_cpus": 3, "device_policy": "explicit"}, env)
    assert chosen["logical_cpus"] == _settings.Sourced(4, "argument logical_cpus")
    assert chosen["device_policy"] == _settings.Sourced("explicit", "flag --device_policy")
    assert chosen["soft_placement"] == _settings.Sourced(False, "environment variable TFPLACE_SOFT_PLACEMENT")
    assert "memory_growth" not in chosen


def test_tfplace_memory_growth_overrides_tf_force_gpu_allow_growth():
    chosen = _settings.resolve({}, {}, {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "TFPLACE_MEMORY_GROWTH": "0"})
    assert chosen["memory_growth"] == _settings.Sourced(False, "environment variable TFPLACE_MEMORY_GROWTH")


def test_visible_gpus_from_environment_and_duplicates_rejected():
    assert _settings.resolve({}, {}, {"TFPLACE_VISIBLE_GPUS": "0, 2"})["visible_gpus"].value == (0, 2)
    assert _settings.resolve({}, {}, {"TFPLACE_VISIBLE_GPUS": ""})["visible_gpus"].value == ()
    with pytest.raises(ConfigurationError, match="distinct"):
        _settings.resolve({"visible_gpus": [1, 1]}, {}, {})


def test_each_declaration_names_the_functions_that_apply_it_and_read_it_back():
    """A setting is declared once: how it is applied and read back are named in its declaration."""
    from tfplace import _tensorflow

    for setting in _settings.SETTINGS:
        named = [setting.state, setting.reads] + ([setting.apply] if setting.apply else [])
        assert all(callable(getattr(_tensorflow, name, None)) for name in named if name), setting.name
        assert setting.apply or setting.gpu, f"{setting.name} is applied by nothing"
    assert [s.name for s in _settings.SETTINGS if not s.reads] == ["memory_fraction", "memory_limit_mb"]
