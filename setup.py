"""Build glue: maps the repository's top-level folders into the single ``xloss`` namespace and
builds each C backend's emulator as a plain shared library (``lib*.so``) — loaded through
cffi's ``dlopen`` and linkable from C, exactly like the vendor library it stands in for.

Each C backend owns its build in ``backends/<name>/build.py``, which defines
``extensions(sanitize: bool) -> list[setuptools.Extension]`` (or a single ``extension(sanitize)``).
``XLOSS_SANITIZE=1`` builds them with
AddressSanitizer and UndefinedBehaviorSanitizer.
"""

import importlib.util
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).parent.resolve()
ROOTS = {"xloss": "xloss", "xloss.reference": "reference", "xloss.backends": "backends"}


def mapped_packages():
    found = []
    for prefix, root in ROOTS.items():
        for init in sorted((HERE / root).rglob("__init__.py")):
            rel = init.parent.relative_to(HERE / root).parts
            if "__pycache__" not in rel:
                found.append(".".join((prefix, *rel)))
    return found


def backend_extensions():
    sanitize = os.environ.get("XLOSS_SANITIZE", "") not in ("", "0")
    exts = []
    for script in sorted((HERE / "backends").glob("*/build.py")):
        spec = importlib.util.spec_from_file_location(f"_xloss_build_{script.parent.name}", script)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        exts.extend(mod.extensions(sanitize=sanitize) if hasattr(mod, "extensions") else
                    [mod.extension(sanitize=sanitize)])
    return exts


class BuildSharedLibs(build_ext):
    """Name the emulators ``lib<name>.so`` (no Python ABI tag): they are C libraries, not modules."""

    def get_ext_filename(self, fullname):
        *pkg, name = fullname.split(".")
        return os.path.join(*pkg, name + ".so")

    def build_extensions(self):
        self.parallel = None  # in order: a library is built before the ones that link it
        super().build_extensions()

    def build_extension(self, ext):
        # ext.xloss_needs: full names of extensions it links (-l<name>), built just before it
        for dep in getattr(ext, "xloss_needs", ()):
            folder = os.path.dirname(self.get_ext_fullpath(dep))
            if folder not in ext.library_dirs:
                ext.library_dirs.append(folder)
        super().build_extension(ext)


setup(
    packages=mapped_packages(),
    package_dir=ROOTS,
    package_data={"xloss.backends": ["*/include/*.h", "*/include/**/*.h", "*/csrc/*.c", "*/csrc/*.h", "*/runner/*.c"]},
    ext_modules=backend_extensions(),
    cmdclass={"build_ext": BuildSharedLibs},
)
