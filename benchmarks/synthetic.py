"""A synthetic compiled component for the build-cost benchmarks: `tus` translation units built into one
Python extension by `pip wheel --no-build-isolation` (setuptools), compiled in parallel by MAX_JOBS threads
(unset: one per CPU, as vllm-xpu-kernels' setup.py does), linked once. Its history: commit 0 imports it,
commit i changes one file (TU (i-1) mod tus: its CHANGE becomes i), so a build of commit k+1 after k
recompiles one TU; `synthetic._synth.changes()` (the sum of the CHANGEs) grows with every commit, which gives
a bisect a first bad commit: `changes() >= changes_at(b)`.

Two flavours: "c++" (template instantiation work, ~`work` x `reps` types per TU) for the host, and "c"
(a large constant table per TU: memory-heavy for the compiler) for containers whose image has no g++.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.core.proc.runner import run

SETUP_PY = '''\
import os
from concurrent.futures import ThreadPoolExecutor
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = {sources!r}


class parallel_build_ext(build_ext):
    """Compile the sources MAX_JOBS at a time (default: one per CPU), then link once."""

    def build_extension(self, ext):
        jobs = int(os.environ.get("MAX_JOBS") or len(os.sched_getaffinity(0)))
        os.makedirs(os.path.join(self.build_lib, "synthetic"), exist_ok=True)
        with open(os.path.join(self.build_lib, "synthetic", "build_jobs.txt"), "w") as f:
            f.write(str(jobs))  # what the build used, for the benchmark to read back
        compile_one = lambda src: self.compiler.compile([src], output_dir=self.build_temp,
                                                        extra_postargs=ext.extra_compile_args)
        with ThreadPoolExecutor(jobs) as pool:
            objects = [o for objs in pool.map(compile_one, ext.sources) for o in objs]
        self.compiler.link_shared_object(objects, self.get_ext_fullpath(ext.name), target_lang=ext.language,
                                         libraries=self.get_libraries(ext), library_dirs=ext.library_dirs)


setup(name="synthetic-kernels", version="1.0", packages=["synthetic"],
      ext_modules=[Extension("synthetic._synth", SOURCES, language={language!r},
                             extra_compile_args={flags!r})],
      cmdclass={{"build_ext": parallel_build_ext}})
'''

MODULE_C = '''\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
{decls}
static PyObject *total(PyObject *self, PyObject *args) {{ long t = 0; {calls} return PyLong_FromLong(t); }}
static PyObject *changes(PyObject *self, PyObject *args) {{ long t = 0; {changes} return PyLong_FromLong(t); }}
static PyMethodDef methods[] = {{{{"total", total, METH_NOARGS, ""}}, {{"changes", changes, METH_NOARGS, ""}},
                                {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, "_synth", NULL, -1, methods}};
PyMODINIT_FUNC PyInit__synth(void) {{ return PyModule_Create(&mod); }}
'''

CPP_TU = '''\
#include <utility>
#define CHANGE {change}
template <int I, int S> struct W {{ static constexpr long v = (long)(I + CHANGE) * S % 7919 + W<I / 2, S>::v; }};
template <int S> struct W<0, S> {{ static constexpr long v = S; }};
template <int S, int... I> constexpr long sum(std::integer_sequence<int, I...>) {{ return (W<I, S>::v + ... + 0L); }}
extern "C" long synth_change{i}(void) {{ return CHANGE; }}
extern "C" long synth_tu{i}(void) {{
    long t = 0;
{body}    return t;
}}
'''


@dataclass(frozen=True)
class Synthetic:
    path: Path
    commits: tuple[str, ...]   # commits[i]: the i-th commit (0: initial import)
    language: str
    tus: int

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()


def tu_source(language: str, i: int, change: int, work: int, reps: int) -> str:
    if language == "c++":
        body = "".join(f"    t += sum<{i * 1000 + r + 1}>(std::make_integer_sequence<int, {work}>{{}});\n"
                       for r in range(reps))
        return CPP_TU.format(i=i, change=change, body=body)
    n = work * reps * 100  # table entries: the compiler holds each as a tree node
    values = ",".join(str((k * 7919 + i) % 100003) for k in range(n))
    return (f"#define CHANGE {change}\nconst long table{i}[] = {{{values}}};\n"
            f"long synth_change{i}(void) {{ return CHANGE; }}\n"
            f"long synth_tu{i}(void) {{ long t = CHANGE; for (unsigned long k = 0; k < sizeof table{i} / "
            f"sizeof *table{i}; k++) t += table{i}[k]; return t; }}\n")


def make_synthetic(path: Path, *, language: str = "c++", tus: int = 40, commits: int = 2, work: int = 800,
                   reps: int = 6) -> Synthetic:
    ext = "cpp" if language == "c++" else "c"
    sources = [f"src/tu{i}.{ext}" for i in range(tus)] + ["src/module.c"]
    flags = ["-std=c++17", "-O1"] if language == "c++" else ["-O1"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.org",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str, when: int = 0) -> str:
        date = f"{1700000000 + when * 60} +0000"
        return run(["git", "-C", str(path), *args], env={**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
                   capture=True).stdout.strip()

    path.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    (path / "src").mkdir()
    (path / "synthetic").mkdir()
    (path / "synthetic" / "__init__.py").write_text("from ._synth import total\n")
    (path / "setup.py").write_text(SETUP_PY.format(sources=sources, language=language, flags=flags))
    (path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    decls = "".join(f"long synth_tu{i}(void);\nlong synth_change{i}(void);\n" for i in range(tus))
    (path / "src" / "module.c").write_text(MODULE_C.format(
        decls=decls, calls=" ".join(f"t += synth_tu{i}();" for i in range(tus)),
        changes=" ".join(f"t += synth_change{i}();" for i in range(tus))))
    for i in range(tus):
        (path / "src" / f"tu{i}.{ext}").write_text(tu_source(language, i, 0, work, reps))
    git("add", "-A")
    git("commit", "-q", "-m", "initial import")
    shas = [git("rev-parse", "HEAD")]
    for c in range(1, commits):
        i = (c - 1) % tus
        (path / "src" / f"tu{i}.{ext}").write_text(tu_source(language, i, c, work, reps))
        git("commit", "-q", "-am", f"change tu{i}", when=c)
        shas.append(git("rev-parse", "HEAD"))
    return Synthetic(path, tuple(shas), language, tus)


def recipe_text(synth: Synthetic, commit: str, *, python: str = sys.executable, target: dict[str, Any] | None = None,
                build: dict[str, Any] | None = None, component: dict[str, Any] | None = None) -> str:
    """A recipe building the synthetic component at `commit` (no toolchain; host unless `target`)."""
    lines = ['description = "build-cost benchmark"', "[toolchain]", 'setvars = ""', "[target]"]
    for k, v in (target or {"runtime": "host", "python": python}).items():
        lines.append(f"{k} = {json.dumps(v)}")
    if build:
        lines.append("[build]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in build.items()]
    lines += ["[components.synthetic]", f"url = {json.dumps(synth.url)}", f'commit = "{commit}"',
              'dist = "synthetic-kernels"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in (component or {}).items()]
    return "\n".join(lines) + "\n"


def changes_at(commit: int, tus: int) -> int:
    """What `changes()` returns at the commit with this index."""
    last = [0] * tus
    for c in range(1, commit + 1):
        last[(c - 1) % tus] = c
    return sum(last)


__all__ = ["Synthetic", "changes_at", "make_synthetic", "recipe_text"]
