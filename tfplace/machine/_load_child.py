"""Loads CUDA libraries the way TensorFlow's loader would and asks each its version; run as a child process
(`python -I _load_child.py REQUESTS`) by `tfplace.machine._libraries`, so that a library that crashes or
hangs while loading takes no user process with it. Standard library only; no CUDA context is made (no
call here initializes CUDA).

REQUESTS is a JSON list of `{"soname": ..., "candidates": [paths tried first, in order]}`; the first
candidate that exists is loaded by path, else the soname (the loader's cache and default directories).
Output: one JSON line `{"start": soname}` before each load, then one with `soname`, `path` (the file
loaded), `error` (the loader's message) and `calls` (each version function's answer).
"""

import ctypes
import json
import os
import sys

_INT = ctypes.c_int
_RTLD_NOW = 2
# the version functions of each library (none initializes CUDA): name -> how many int out-arguments,
# "size_t" for a function returning the version, "property" for the three MAJOR/MINOR/PATCH queries
_VERSIONS: "dict[str, dict[str, int | str]]" = {
    "libcuda": {"cuDriverGetVersion": 1},
    "libcudart": {"cudaRuntimeGetVersion": 1},
    "libcublas": {"cublasGetProperty": "property"},
    "libcublasLt": {"cublasLtGetVersion": "size_t"},
    "libcufft": {"cufftGetVersion": 1},
    "libcusolver": {"cusolverGetProperty": "property"},
    "libcusparse": {"cusparseGetProperty": "property"},
    "libcudnn": {"cudnnGetVersion": "size_t", "cudnnGetCudartVersion": "size_t"},
    "libnccl": {"ncclGetVersion": 1},
    "libcurand": {"curandGetVersion": 1},
    "libnvrtc": {"nvrtcVersion": 2},
    "libnvJitLink": {"nvJitLinkVersion": 2},
}


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]


def _libdl():
    """The loader's own functions (in libc since glibc 2.34, in libdl before)."""
    libc = ctypes.CDLL(None)
    library = libc if hasattr(libc, "dlinfo") else ctypes.CDLL("libdl.so.2")
    library.dlopen.restype = ctypes.c_void_p
    library.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    library.dlerror.restype = ctypes.c_char_p
    return library


def _loaded_path(libdl, handle):
    """The file the loader took for `handle` (glibc's dlinfo RTLD_DI_LINKMAP)."""
    link = ctypes.POINTER(_LinkMap)()
    if libdl.dlinfo(ctypes.c_void_p(handle), 2, ctypes.byref(link)) != 0 or not link:
        return None
    name = link.contents.l_name
    return os.path.realpath(name.decode()) if name else None


def _ask(library, function, kind):
    call = getattr(library, function)
    if kind == "size_t":
        call.restype = ctypes.c_size_t
        return int(call())
    if kind == "property":
        values = []
        for which in range(3):
            value = _INT(0)
            if call(_INT(which), ctypes.byref(value)) != 0:
                return None
            values.append(value.value)
        return values
    outs = [_INT(0) for _ in range(kind)]
    if call(*(ctypes.byref(out) for out in outs)) != 0:
        return None
    return outs[0].value if kind == 1 else [out.value for out in outs]


def _load(libdl, request):
    soname = request["soname"]
    target = next((path for path in request["candidates"] if os.path.exists(path)), soname)
    handle = libdl.dlopen(target.encode(), _RTLD_NOW | ctypes.RTLD_GLOBAL)
    if not handle:
        return {"soname": soname, "path": None, "error": (libdl.dlerror() or b"").decode(errors="replace"),
                "calls": {}}
    library = ctypes.CDLL(target, handle=handle)
    calls = {}
    for function, kind in _VERSIONS.get(soname.split(".so")[0], {}).items():
        try:
            calls[function] = _ask(library, function, kind)
        except AttributeError:
            calls[function] = None
    return {"soname": soname, "path": _loaded_path(libdl, handle) or os.path.realpath(target), "error": None,
            "calls": calls}


def main():
    libdl = _libdl()
    for request in json.loads(sys.argv[1]):
        print(json.dumps({"start": request["soname"]}), flush=True)
        print(json.dumps(_load(libdl, request)), flush=True)


if __name__ == "__main__":
    main()
