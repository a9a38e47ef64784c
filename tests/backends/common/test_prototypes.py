"""The cffi declarations of both C backends come from their installed headers (backends/prototypes.py):
the extractor, and for each backend that cffi gets every exported function of the headers, no other,
each with exactly the header's type (a C compiler checks every prototype against the headers)."""

from __future__ import annotations

import re
import shutil
import subprocess

import cffi
import pytest

from xloss.backends.ascend_aclnn import _cdef
from xloss.backends.ft78ne_shim import abi
from xloss.backends.prototypes import prototypes

ASCEND_INCLUDE = _cdef.INCLUDE
FT_INCLUDE = abi.INCLUDE
# backend -> (its cdef strings, the headers behind them, the export macro)
BACKENDS = {
    "ascend": ({"CDEF": _cdef.CDEF}, sorted(ASCEND_INCLUDE.rglob("*.h")), "ACL_FUNC_VISIBILITY"),
    # ft78ne_private_shim.h is for port authors: xloss calls none of its functions
    "ft78ne": ({"VENDOR_CDEF": abi.VENDOR_CDEF, "VOCAB_PARALLEL_CDEF": abi.VOCAB_PARALLEL_CDEF,
                "LOSS_FORWARD_CDEF": abi.LOSS_FORWARD_CDEF, "SOFTMAX_CE_CDEF": abi.SOFTMAX_CE_CDEF,
                "EMU_CDEF": abi.EMU_CDEF, "SCE_I8_CDEF": abi.SCE_I8_CDEF},
               sorted(h for h in FT_INCLUDE.glob("*.h") if h.name != "ft78ne_private_shim.h"), "FT78NE_API"),
}


def test_the_extractor_reads_prototypes_as_a_compiler_would(tmp_path):
    h = tmp_path / "x.h"
    h.write_text("/* a header\n * API int commented_out(void);\n */\n#ifndef API\n#define API\n#endif\n"
                 "typedef unsigned short half;\nint not_exported(int a);\n"
                 "/* OURS */ API void f(int a, /* the size */ float *b,\n"
                 "                      half *c);  // trailing\n"
                 "API const char *g(void);\n"
                 "API void h(const char *fmt, ...)\n#if defined(__GNUC__)\n"
                 "    __attribute__((format(printf, 1, 2)))\n#endif\n    ;\n"
                 "API int k(\n    int x\n);\n")
    assert prototypes([h], "API") == ("void f(int a, float *b, half *c);\nconst char *g(void);\n"
                                      "void h(const char *fmt, ...);\nint k(int x);\n")
    with pytest.raises(ValueError, match="no NOPE prototypes"):
        prototypes([h], "NOPE")


def _functions(backend: str, cdef: str) -> dict:
    """Function name -> C type, as cffi reads ``cdef`` (ft78ne's vocabulary-parallel one uses VENDOR_CDEF's half)."""
    ffi = cffi.FFI()
    ffi.cdef(cdef if backend == "ascend" or "typedef uint16_t half;" in cdef else "typedef uint16_t half;\n" + cdef)
    return {k.split(" ", 1)[1]: tp.get_c_name() for k, (tp, _) in ffi._parser._declarations.items()
            if k.startswith("function ")}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_cffi_declares_every_exported_function_of_the_headers_and_no_other(backend):
    cdefs, headers, macro = BACKENDS[backend]
    exported = set()
    for h in headers:  # an independent reading: every name that follows the macro and precedes "("
        text = re.sub(r"/\*.*?\*/", " ", h.read_text(), flags=re.S)
        exported |= set(re.findall(rf"^\s*{macro}\s[^;(#]*?\b(\w+)\s*\(", text, flags=re.M))
    declared = {}
    for name, cdef in cdefs.items():
        found = _functions(backend, cdef)
        assert not set(found) & set(declared), f"{name} declares a function twice"
        declared.update(found)
    assert set(declared) == exported and len(exported) > 30


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_cffi_prototype_has_the_headers_type(backend, tmp_path):
    cdefs, headers, macro = BACKENDS[backend]
    include = ASCEND_INCLUDE if backend == "ascend" else FT_INCLUDE
    lines = [f'#include "{h.relative_to(include)}"' for h in headers if macro + " " in h.read_text()]
    protos = re.findall(r"^([\w\s\*]+?\b)(\w+)\((.*)\);$", "".join(cdefs.values()), flags=re.M)
    assert len(protos) == sum(len(_functions(backend, c)) for c in cdefs.values())  # every one is checked
    lines += [f"{ret.strip()} (*check_{name})({args}) = {name};" for ret, name, args in protos]
    src = tmp_path / "check.c"
    src.write_text("\n".join(lines) + "\n")
    res = subprocess.run(["cc", "-std=c11", "-c", "-Werror=incompatible-pointer-types", "-Wall",
                          "-Wno-unused-const-variable", f"-I{include}", str(src), "-o", str(tmp_path / "check.o")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
