"""The placement tests and the conformance suite on every TensorFlow release tfplace accepts (2.16 to 2.21).

    pip install nox
    nox -s releases                          # every release, one after another
    nox -s "releases(tensorflow='2.16.2')"   # one release

Each session is a fresh virtual environment with `tensorflow-cpu` of one release (its latest patch) and
tfplace's test extras, resolved together (so that NumPy is one the release accepts), and runs the tests
marked `placement` or `conformance` with oneDNN on; BUILD.md records what passed on which release.
"""

from __future__ import annotations

import nox

RELEASES = ["2.16.2", "2.17.1", "2.18.1", "2.19.1", "2.20.0", "2.21.0"]

nox.options.sessions = ["releases"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
@nox.parametrize("tensorflow", RELEASES)
def releases(session: nox.Session, tensorflow: str) -> None:
    """The placement tests and the conformance suite on `tensorflow-cpu==<tensorflow>`."""
    session.install(f"tensorflow-cpu=={tensorflow}", "-e", ".[test]")
    session.run("python", "-c", "import tensorflow as tf; print('TensorFlow', tf.__version__)")
    session.run("python", "-m", "pytest", "-q", "-n", "auto", "--maxprocesses=4", "-m", "placement or conformance",
                *session.posargs, env={"TF_ENABLE_ONEDNN_OPTS": "1"})
