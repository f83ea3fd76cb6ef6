"""A PEP 517 build backend for the ckptsync Python module, in the standard
library only.

The module is one pure-Python package, so a wheel is a zip of its files
and three metadata files.  Shipping the backend in the source tree
(pyproject.toml: ``backend-path``) means ``pip install client/python``
needs nothing from an index and no setuptools or wheel: it works offline
with any CPython >= 3.8 and any pip that speaks PEP 517 (19 and later) --
Debian's, a pyenv, conda or uv interpreter alike.
"""
import base64
import hashlib
import os
import re
import tarfile
import zipfile

NAME = "ckptsync"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = ("Tell a running ckptsyncd that a training checkpoint is complete, "
           "and wait until it is durable")


def _version():
    """__version__ from the module's source (not imported)."""
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError("ckptsync/__init__.py: no __version__ line")
    return m.group(1)


def _metadata():
    return ("Metadata-Version: 2.1\n"
            "Name: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.8\n"
            "Classifier: Programming Language :: Python :: 3\n"
            "Classifier: Operating System :: POSIX :: Linux\n" % (NAME, _version(), SUMMARY))


def _sources():
    pkg = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            yield os.path.join(pkg, name), NAME + "/" + name


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "%s,sha256=%s,%d\n" % (arcname, digest.decode(), len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = "%s-%s.dist-info" % (NAME, version)
    wheel_name = "%s-%s-py3-none-any.whl" % (NAME, version)
    files = [(arc, open(path, "rb").read()) for path, arc in _sources()]
    files.append((dist_info + "/METADATA", _metadata().encode()))
    files.append((dist_info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: ckptsync_build\n"
                  b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = "".join(_record_line(arc, data) for arc, data in files)
    record += dist_info + "/RECORD,,\n"
    files.append((dist_info + "/RECORD", record.encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "_build/ckptsync_build.py"]:
            t.add(os.path.join(HERE, rel), base + "/" + rel)
        for path, arc in _sources():
            t.add(path, base + "/" + arc)
        info = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(info)
        import io
        t.addfile(ti, io.BytesIO(info))
    return name
