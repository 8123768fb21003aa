"""Conformance suite: tfplace's captures against TensorFlow's own placement log (see compare.py)."""
