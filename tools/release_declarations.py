"""Takes what each TensorFlow release's Linux x86-64 wheel declares about CUDA, without downloading the wheel:
its `tensorflow/python/platform/build_info.py` and the `Requires-Dist` lines of its `METADATA`, read from
PyPI by HTTP range requests on the wheel (a zip: its central directory, then the two members).

    python tools/release_declarations.py tests/fixtures/releases tensorflow==2.15.0 tensorflow-gpu==1.15.5 ...

Each release becomes a folder `<distribution>-<version>/` holding `build_info.py`, `requires.txt` and
`wheel.txt` (the wheel's file name, its sha256 as PyPI lists it, and the Pythons the release has Linux x86-64
wheels for). Standard library only.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import urllib.request
import zipfile


class _Remote(io.RawIOBase):
    """A seekable, readable file over HTTP range requests."""

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.at = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.at = {0: offset, 1: self.at + offset, 2: self.size + offset}[whence]
        return self.at

    def tell(self) -> int:
        return self.at

    def readinto(self, buffer) -> int:
        if self.at >= self.size:
            return 0
        end = min(self.size, self.at + len(buffer)) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.at}-{end}"})
        with urllib.request.urlopen(request, timeout=120) as response:
            data = response.read()
        buffer[:len(data)] = data
        self.at += len(data)
        return len(data)


def _wheel(distribution: str, version: str) -> dict:
    request = urllib.request.Request(f"https://pypi.org/simple/{distribution}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        files = json.load(response)["files"]
    name = distribution.replace("-", "_")
    pattern = re.compile(rf"^{name}-{re.escape(version)}-cp3(\d+)-cp3\d+m?-manylinux[\w.]*x86_64\.whl$")
    found = [(int(m.group(1)), f) for f in files if (m := pattern.match(f["filename"]))]
    if not found:
        raise SystemExit(f"no Linux x86-64 CPython 3 wheel of {distribution}=={version} on PyPI")
    newest = dict(max(found, key=lambda pair: pair[0])[1])  # the newest Python's
    newest["pythons"] = sorted({f"3.{minor}" for minor, _ in found}, key=lambda v: int(v[2:]))
    return newest


def take(folder: str, distribution: str, version: str) -> None:
    wheel = _wheel(distribution, version)
    remote = io.BufferedReader(_Remote(wheel["url"], wheel["size"]), buffer_size=1 << 20)
    with zipfile.ZipFile(remote) as archive:
        names = archive.namelist()
        build = next(n for n in names if re.fullmatch(r"tensorflow(_core)?/python/platform/build_info.py", n))
        metadata = next(n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        build_text = archive.read(build).decode("utf-8")
        requires = [line[len("Requires-Dist: "):] for line in archive.read(metadata).decode("utf-8").splitlines()
                    if line.startswith("Requires-Dist: ")]
    out = os.path.join(folder, f"{distribution}-{version}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "build_info.py"), "w", encoding="utf-8") as f:
        f.write(build_text)
    with open(os.path.join(out, "requires.txt"), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in requires))
    with open(os.path.join(out, "wheel.txt"), "w", encoding="utf-8") as f:
        f.write(f"{wheel['filename']}\nsha256:{wheel['hashes'].get('sha256', '')}\n"
                f"pythons: {' '.join(wheel['pythons'])}\n")
    print(f"{distribution}=={version}: {wheel['filename']}, {len(requires)} requirement(s)")


if __name__ == "__main__":
    for spec in sys.argv[2:]:
        distribution, _, version = spec.partition("==")
        take(sys.argv[1], distribution, version)
