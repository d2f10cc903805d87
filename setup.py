"""Build rules for qdrant_guard's native kernels.

Rules (kept deliberately strict, see STYLE.md):
1. Every extension below is required. A compiler or Cython error fails the build; there is no
   optional-extension fallback, because a silently missing kernel would let CI test the Python twin.
2. The C in native/ is plain C99 and is compiled with C-only flags; Cython bindings live in
   native/_*.pyx with their `cdef extern` declarations in native/*.pxd.
3. When the generated .c of a .pyx is shipped (sdist), it is used and Cython is not needed.
4. QG_EXTENSIONS=_noise,_scan (comma list) builds a subset, for kernel development only.
"""
import os

import numpy
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))

EXTENSIONS = {
    "_noise": ["native/_noise.pyx", "native/chacha20.c", "native/aes256ctr.c", "native/noise.c"],
    "_scan": ["native/_scan.pyx", "native/scan.c"],
    "_detect": ["native/_detect.pyx", "native/detect.c"],
}

CFLAGS = ["-O3", "-std=gnu99", "-ffp-contract=off", "-fno-strict-aliasing", "-Wall", "-Wno-unused-function"]


def _sources(srcs):
    out = []
    for s in srcs:
        generated = s[:-4] + ".c" if s.endswith(".pyx") else None
        if generated and not os.path.exists(os.path.join(HERE, s)) and os.path.exists(os.path.join(HERE, generated)):
            out.append(generated)
        else:
            out.append(s)
    return out


def extensions():
    wanted = os.environ.get("QG_EXTENSIONS")
    names = [n.strip() for n in wanted.split(",")] if wanted else list(EXTENSIONS)
    exts = []
    for name in names:
        if name not in EXTENSIONS:
            raise SystemExit(f"QG_EXTENSIONS: unknown extension {name!r}; known: {sorted(EXTENSIONS)}")
        exts.append(
            Extension(
                f"qdrant_guard.{name}",
                sources=_sources(EXTENSIONS[name]),
                include_dirs=["native", numpy.get_include()],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=CFLAGS,
            )
        )
    if any(s.endswith(".pyx") for e in exts for s in e.sources):
        from Cython.Build import cythonize

        exts = cythonize(exts, language_level=3, compiler_directives={"embedsignature": True})
    return exts


setup(ext_modules=extensions())
