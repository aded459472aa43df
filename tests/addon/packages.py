"""Small packages made here, into a local directory that add-on builds resolve against with
``--find-links DIR --no-index``: no test downloads anything.

- ``addon-probe-pure`` 1.0: a pure-Python wheel (module ``addon_probe_pure``);
- ``addon-probe-torch`` 1.0: a wheel requiring ``torch>=`` the environment's own torch;
- ``addon-probe-pins`` 1.0: a wheel requiring another torch (``torch==2.5.1``);
- ``addon-probe-sdist`` 1.0: a pure-Python source distribution (setuptools);
- ``addon-probe-ext`` 1.0: a source distribution with a C++ extension compiled against the
  building environment's torch headers, which says the torch version they are.

Wheels are written byte for byte here (fixed times, sorted members), so the same call makes
the same files.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

PURE = "addon-probe-pure"
NEEDS_TORCH = "addon-probe-torch"
PINS_TORCH = "addon-probe-pins"
SDIST = "addon-probe-sdist"
EXTENSION = "addon-probe-ext"
OTHER_TORCH = "2.5.1"
_TIME = (1980, 1, 1, 0, 0, 0)

# A C++ extension compiled against torch's headers: it reports the torch version of the
# headers it was compiled with (a small header, so the build takes seconds, not the minute
# torch/extension.h takes).
EXTENSION_SOURCE = """\
#include <Python.h>
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

static PyObject* built_for(PyObject*, PyObject*) {
    return Py_BuildValue("(iii)", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

static PyMethodDef methods[] = {
    {"built_for", built_for, METH_NOARGS, "the torch version of the headers"},
    {nullptr, nullptr, 0, nullptr},
};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "addon_probe_ext", nullptr, -1, methods};

PyMODINIT_FUNC PyInit_addon_probe_ext() { return PyModule_Create(&module); }
"""
# Found without importing torch (which takes seconds, at each of pip's metadata and build
# steps): the torch of the environment that builds it, as it is there (no build isolation:
# an isolated build would have no torch and fail).
EXTENSION_SETUP = """\
import importlib.util
import os

from setuptools import Extension, setup

torch = importlib.util.find_spec("torch").submodule_search_locations[0]
include = os.path.join(torch, "include")
setup(
    name="addon-probe-ext",
    version="1.0",
    ext_modules=[
        Extension(
            "addon_probe_ext",
            ["probe.cpp"],
            include_dirs=[include, os.path.join(include, "torch", "csrc", "api", "include")],
            language="c++",
        )
    ],
)
"""


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def write_wheel(
    dest: Path,
    name: str,
    version: str,
    modules: Mapping[str, str],
    requires: Sequence[str] = (),
) -> Path:
    """A pure-Python wheel of ``modules`` ({path in the wheel: source})."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {item}\n" for item in requires)
    files = {path: text.encode() for path, text in modules.items()}
    files[f"{info}/METADATA"] = metadata.encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: ddpimg-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member in sorted(files):
            wheel.writestr(zipfile.ZipInfo(member, _TIME), files[member])
    return path


def write_sdist(dest: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    """A source distribution ``NAME-VERSION.tar.gz`` of ``files`` (PKG-INFO added)."""
    top = f"{name.replace('-', '_')}-{version}"
    members = dict(files)
    members["PKG-INFO"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    path = dest / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for member in sorted(members):
            data = members[member].encode()
            entry = tarfile.TarInfo(f"{top}/{member}")
            entry.size = len(data)
            entry.mode = 0o644
            tar.addfile(entry, io.BytesIO(data))
    return path


def setuptools_project(name: str, version: str, module: str, source: str) -> dict[str, str]:
    return {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n',
        "setup.py": "from setuptools import setup\n\n"
        f"setup(name={name!r}, version={version!r}, py_modules=[{module!r}])\n",
        f"{module}.py": source,
    }


def make_index(dest: Path, torch_version: str, extension: bool = False) -> Path:
    """The test packages in ``dest`` (created); ``torch_version``: the environment's torch,
    which addon-probe-torch requires at least."""
    dest.mkdir(parents=True, exist_ok=True)
    release = torch_version.split("+", 1)[0]
    write_wheel(dest, PURE, "1.0", {"addon_probe_pure.py": "VALUE = 42\n"})
    write_wheel(
        dest,
        NEEDS_TORCH,
        "1.0",
        {"addon_probe_torch.py": "import torch\n\n\ndef ones():\n    return torch.ones(2)\n"},
        [f"torch>={release}", PURE],
    )
    write_wheel(
        dest, PINS_TORCH, "1.0", {"addon_probe_pins.py": "PINNED = True\n"},
        [f"torch=={OTHER_TORCH}"],
    )  # fmt: skip
    write_sdist(
        dest,
        SDIST,
        "1.0",
        setuptools_project(SDIST, "1.0", "addon_probe_sdist", "WORD = 'built'\n"),
    )
    if extension:
        write_sdist(
            dest,
            EXTENSION,
            "1.0",
            {
                "pyproject.toml": '[build-system]\nrequires = ["setuptools", "torch"]\n'
                'build-backend = "setuptools.build_meta"\n',
                "setup.py": EXTENSION_SETUP,
                "probe.cpp": EXTENSION_SOURCE,
            },
        )
    return dest
