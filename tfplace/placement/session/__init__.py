"""The capture session's state, and the user's frame behind each op.

`_session` owns the state every open capture and guard shares (hooks, patches, graph
collection, caches) and what TensorFlow did that outlives a capture; `_sources` finds the user's frame and line
behind an op, with its caches in the session.

Imports: nothing of tfplace.
"""
