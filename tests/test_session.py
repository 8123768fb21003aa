"""The capture session: made by the first capture or guard, shared by every thread's, dropped by the last."""


def test_one_session_from_the_first_capture_to_the_last_and_nothing_left_behind(python):
    found = python("""
        import threading, tensorflow as tf, tfplace
        from tfplace.placement import _session
        from tfplace import _tensorflow
        x = tf.ones((2, 2))
        seen = {"before": _session.current() is None}
        with tfplace.capture_placement() as outer:
            first = _session.current()
            other = {}
            def work():
                with tfplace.capture_placement() as log:
                    other["same"] = _session.current() is first
                    tf.matmul(x, x)
                other["records"] = len(log)
            thread = threading.Thread(target=work)
            thread.start(); thread.join()
            with tfplace.transfer_guard("log"):
                seen["nested"] = _session.current() is first
            seen["hooks"] = len(first.hooks)
        seen["after"] = _session.current() is None
        seen["thread"] = other
        seen["patched"] = [getattr(_tensorflow.SET_DEVICE.owner, _tensorflow.SET_DEVICE.name) is not
                           _tensorflow.SET_DEVICE.replaced]
        with tfplace.capture_placement():
            seen["fresh"] = _session.current() is not first and _session.current().described == {}
        report(seen)
    """)
    assert found == {"before": True, "nested": True, "hooks": 1, "after": True,
                     "thread": {"same": True, "records": 1}, "patched": [False], "fresh": True}


def test_the_code_objects_a_session_keys_on_stay_as_many_as_the_code_that_ran(python):
    found = python("""
        import tensorflow as tf, tfplace
        from tfplace.placement import _session
        f = tf.function(lambda x: x * 2.0)
        g = tf.function(lambda x: x + 1.0)
        x = tf.ones(2)
        def from_here():
            return f(x)
        def from_there():
            return g(x)
        with tfplace.capture_placement(sources=True):
            session = _session.current()
            from_here(); from_there()
            first = len(session.pinned)
            for _ in range(200):  # calls from two places in turn: each reads its origin and line afresh
                from_here(); from_there()
            report({"first": first, "after": len(session.pinned), "origins": len(session.origin_shortcuts)})
    """)
    assert 0 < found["after"] == found["first"] and found["origins"] <= found["after"]
