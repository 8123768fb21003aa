"""configure(): what it applies before and after runtime start (each case in its own process)."""


def test_logical_cpus_then_matmul_on_cpu1(python):
    out = python("""
        import tensorflow as tf, tfplace
        config = tfplace.configure(logical_cpus=2)
        with tfplace.capture_placement() as log:
            with tfplace.device("CPU:1"):
                y = tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
        report({"logical": list(config.logical_devices), "started": config.runtime_started,
                "device": y.device, "matmul": list(log.devices_for("MatMul"))})
    """)
    assert out == {"logical": ["/device:CPU:0", "/device:CPU:1"], "started": False,
                   "device": "/job:localhost/replica:0/task:0/device:CPU:1", "matmul": ["/device:CPU:1"]}


def test_after_start_same_state_is_a_noop_and_other_state_raises(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2, soft_placement=False)
        tf.ones(1)
        again = tfplace.configure(logical_cpus=2, soft_placement=True, device_policy="warn")
        try:
            tfplace.configure(logical_cpus=3, visible_gpus=[], memory_growth=True)
            error = None
        except tfplace.RuntimeInitializedError as err:
            error = str(err)
        report({"soft": again.soft_placement, "policy": again.device_policy, "error": error,
                "is_runtime_error": isinstance(tfplace.RuntimeInitializedError("x"), RuntimeError)})
    """)
    assert out["soft"] is True and out["policy"] == "warn"
    assert out["is_runtime_error"]
    assert "logical_cpus=3 (from argument logical_cpus) cannot be applied: 2 logical CPU(s) exist" in out["error"]
    assert "before the first TensorFlow op" in out["error"]
    assert "visible_gpus" not in out["error"]  # [] is already the state on a machine without GPU


def test_rejected_configure_changes_nothing(python):
    out = python("""
        import tensorflow as tf, tfplace
        try:
            tfplace.configure(logical_cpus=2, soft_placement=False, device_policy="explicit", memory_fraction=0)
        except tfplace.ConfigurationError as err:
            message = str(err)
        config = tfplace.configure()
        report({"message": message, "logical": list(config.logical_devices),
                "soft": config.soft_placement, "policy": config.device_policy})
    """)
    assert out["message"].startswith("memory_fraction=0 (from argument memory_fraction)")
    assert out == {**out, "logical": ["/device:CPU:0"], "soft": True, "policy": "silent"}


def test_environment_and_flags_priority(python):
    out = python("""
        import sys
        from absl import flags
        import tfplace, tfplace.flags
        flags.FLAGS(["prog", "--logical_cpus=3", "--device_policy=warn"])
        config = tfplace.configure(device_policy="explicit")
        report({"logical": len(config.logical_devices), "policy": config.device_policy,
                "soft": config.soft_placement, "sources": dict(config.sources)})
    """, env={"TFPLACE_LOGICAL_CPUS": "2", "TFPLACE_SOFT_PLACEMENT": "false"})
    assert out["logical"] == 3 and out["policy"] == "explicit" and out["soft"] is False
    assert out["sources"] == {"soft_placement": "environment variable TFPLACE_SOFT_PLACEMENT",
                              "device_policy": "argument device_policy", "logical_cpus": "flag --logical_cpus"}


def test_flag_validators_reject_bad_values_and_combinations(python):
    out = python("""
        from absl import flags
        import tfplace.flags
        errors = []
        for argv in (["--memory_fraction=1.5"], ["--logical_cpus=0"], ["--visible_gpus=0,x"],
                     ["--memory_fraction=0.5", "--memory_limit_mb=100"], ["--memory_growth", "--logical_gpus=2"]):
            try:
                flags.FLAGS(["prog", *argv])
                errors.append(None)
            except flags.IllegalFlagValueError as err:
                errors.append(str(err))
            flags.FLAGS.unparse_flags()
        report(errors)
    """)
    assert "memory_fraction=1.5 (from flag --memory_fraction)" in out[0]
    assert "logical_cpus=0 (from flag --logical_cpus)" in out[1]
    assert "visible_gpus='0,x' (from flag --visible_gpus) cannot be read" in out[2]
    assert "cannot be combined" in out[3] and "cannot be combined" in out[4]


def test_importing_tfplace_defines_no_flag_and_starts_nothing(python):
    out = python("""
        from absl import flags
        import tfplace
        from tfplace import _tensorflow
        tfplace.num_gpus(); tfplace.try_gpu(); tfplace.configure(memory_growth=True)
        report({"flags": [n for n in ("logical_cpus", "soft_placement") if n in flags.FLAGS],
                "started": _tensorflow.runtime_started()})
    """)
    assert out == {"flags": [], "started": False}


def test_bad_environment_variable_names_itself(python):
    out = python("""
        import tfplace
        try:
            tfplace.configure()
        except tfplace.ConfigurationError as err:
            report(str(err))
    """, env={"TFPLACE_MEMORY_LIMIT_MB": "lots"})
    assert out.startswith("TFPLACE_MEMORY_LIMIT_MB='lots' (from environment variable TFPLACE_MEMORY_LIMIT_MB)")


def test_config_prints_readably(python):
    out = python("""
        import tfplace
        report(str(tfplace.configure(logical_cpus=2)))
    """)
    assert "logical_cpus     = 2  [argument logical_cpus]" in out
    assert "logical_devices  = /device:CPU:0, /device:CPU:1" in out


def test_log_placement_is_the_guides_logging_fixed_at_start():
    from conftest import result_of, run_python

    shown = run_python("""
        import tensorflow as tf, tfplace
        config = tfplace.configure(log_placement=True)
        tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        same = tfplace.configure(log_placement=True).log_placement
        try:
            tfplace.configure(log_placement=False)
            error = ""
        except tfplace.RuntimeInitializedError as err:
            error = str(err)
        report({"before": config.log_placement, "same": same, "error": error})
    """)
    out = result_of(shown)
    assert out["before"] is True and out["same"] is True
    assert ("log_placement=False (from argument log_placement) cannot be applied: placement logging is on"
            in out["error"])
    from tfplace import PlacementLog

    PlacementLog.from_text(shown.stderr).assert_placed("MatMul", "CPU:0")  # TensorFlow's own line, any kernel name
    quiet = run_python("""
        import tensorflow as tf, tfplace
        config = tfplace.configure()
        with tfplace.capture_placement() as log:
            tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
        try:
            tfplace.configure(log_placement=True)
            error = ""
        except tfplace.RuntimeInitializedError as err:
            error = str(err)
        report({"logging": config.log_placement, "matmul": log.devices_for("MatMul"), "error": error})
    """)
    out = result_of(quiet)
    assert out["logging"] is False and out["matmul"] == ["/device:CPU:0"]
    assert "placement logging is off, as it was when the runtime started" in out["error"]
    assert "Executing op" not in quiet.stderr and "Executing op" not in quiet.stdout


def test_configure_keywords_config_fields_and_flags_follow_the_declarations(python):
    out = python("""
        import dataclasses, inspect, typing
        import tfplace, tfplace.flags
        from absl import flags
        from tfplace.config._settings import SETTINGS
        parameters = inspect.signature(tfplace.configure).parameters.values()
        report({
            "keywords": [(p.name, p.kind == p.KEYWORD_ONLY, p.default) for p in parameters],
            "declared": [s.name for s in SETTINGS],
            "fields": [f.name for f in dataclasses.fields(tfplace.Config)][:len(SETTINGS)],
            "flags": list(tfplace.flags.FLAG_HOLDERS),
            "help": [s.kind.allowed in flags.FLAGS[s.name].help for s in SETTINGS],
            "documented": [f"{s.name}:" in tfplace.configure.__doc__ for s in SETTINGS],
        })
    """)
    declared = out["declared"]
    assert out["keywords"] == [[name, True, None] for name in declared], "configure()'s keywords are the settings"
    assert out["fields"] == declared and out["flags"] == declared
    assert all(out["help"]) and all(out["documented"])


def test_after_start_only_the_fixed_settings_that_differ_are_named(python):
    out = python("""
        import tensorflow as tf, tfplace
        tfplace.configure(logical_cpus=2)
        tf.ones(1)
        errors = []
        for asked in ({"logical_cpus": 2, "log_placement": True}, {"logical_cpus": 2, "soft_placement": False}):
            try:
                errors.append(tfplace.configure(**asked).soft_placement)
            except tfplace.RuntimeInitializedError as err:
                errors.append(str(err))
        report(errors)
    """)
    refused, soft = out
    assert ("log_placement=True (from argument log_placement) cannot be applied: placement logging is off, as it was "
            "when the runtime started") in refused and "logical_cpus" not in refused.split("Allowed")[0]
    assert soft is False
