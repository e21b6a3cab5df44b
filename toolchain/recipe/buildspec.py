"""The recipe's build-cost keys: `[build]` (compiler cache, jobs, memory per job) and the per-component
`jobs` / `memory-per-job`; and the job variables a recipe env may pin (positive integers).

    [build]
    compiler-cache = "ccache"    # or "none"; unset: ccache when one is found, else uncached with a warning
    jobs = 4                     # pin the compile jobs of every component (unset: sized by memory)
    memory-per-job = "2GiB"      # what one compile job of a component needs, unless it declares its own
    compiler-cache-remote = "redis://cache.example:6379"   # a compiler cache shared by machines (or http://);
                                 # never with credentials: those come from $TOOLCHAIN_COMPILER_CACHE_REMOTE

    [components.NAME]
    memory-per-job = "8GiB"
    jobs = 2
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from toolchain.core.record import field, record
from toolchain.core.regex import Regex
from toolchain.recipe.keys import key, keys_of

GiB = 1024 ** 3
MiB = 1024 ** 2
COMPILER_CACHES = ("ccache", "none")
STORE_SCHEMES = {"redis": 6379, "http": 80}  # the remote storages of ccache this tool passes on, default ports
JOB_ENV = ("MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "ARK_SYCL_TLA_JOBS")
_SIZE = Regex(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)(B?)\s*$", re.IGNORECASE)

Add = Callable[[str, str], None]


def parse_size(text: str) -> int:
    """"8GiB", "8G", "512 MiB" (powers of 1024), "3GB" (powers of 1000), "1048576" (bytes) → bytes;
    ValueError when it is not a positive size."""
    m = _SIZE.match(text) if isinstance(text, str) else None
    if not m or (m.group(3) and not m.group(2)):
        raise ValueError(f"{text!r} is not a size")
    number, unit, binary, byte = float(m.group(1)), m.group(2).upper(), m.group(3), m.group(4)
    power = "KMGT".index(unit) + 1 if unit else 0
    base = 1000 if (unit and byte and not binary) else 1024
    value = int(number * base ** power)
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


@record
class BuildSpec:
    """A recipe's [build] table: compiler cache, jobs and memory per job."""

    compiler_cache: str = field(default="", metadata=key(str))  # "" = not set: ccache if available (not required)
    jobs: int = field(default=0, metadata=key(int))  # 0 = sized by memory
    memory_per_job: int = field(default=0, metadata=key(str))  # "8GiB" in the recipe; 0 = the component's own or the tool's default
    compiler_cache_remote: str = field(default="", metadata=key(str))  # a shared compiler cache, without credentials ("": none in the recipe)

    @property
    def cache_required(self) -> bool:
        """Whether the recipe requires ccache (compiler-cache = "ccache"): a build without one is refused."""
        return self.compiler_cache == "ccache"


BUILD_KEYS = keys_of(BuildSpec)


def build_spec(table: Any, add: Add) -> BuildSpec:
    """The recipe's [build] table typed as a BuildSpec; each bad value reported through `add`."""
    if not isinstance(table, dict):
        return BuildSpec()
    cc = table.get("compiler-cache", "")
    if isinstance(cc, str) and cc and cc not in COMPILER_CACHES:
        add("build.compiler-cache", f"unknown compiler cache {cc!r}; use one of {', '.join(map(repr, COMPILER_CACHES))}")
    jobs, mem = _jobs_and_memory(table, "build.", add)
    remote = table.get("compiler-cache-remote", "")
    if isinstance(remote, str) and remote:
        try:
            if parse_store_url(remote).credentials:
                raise ValueError("holds credentials (user@ or :password@): a recipe is recorded in every lock and "
                                 "shared; set the URL with its password in the environment instead: "
                                 "export TOOLCHAIN_COMPILER_CACHE_REMOTE='redis://:PASSWORD@HOST:PORT'")
        except ValueError as exc:
            add("build.compiler-cache-remote", str(exc))
            remote = ""
    return BuildSpec(cc if isinstance(cc, str) and cc in COMPILER_CACHES else "", jobs, mem,
                     remote if isinstance(remote, str) else "")


@record
class StoreURL:
    """A shared compiler cache's address, as ccache's remote storage takes it (`URL|attribute=value...`)."""
    scheme: str        # "redis" | "http"
    host: str
    port: int
    credentials: bool  # the URL carries a user or a password
    attributes: tuple[tuple[str, str], ...] = ()  # ccache's `|name=value` attributes given with the URL


def parse_store_url(value: str) -> StoreURL:
    """`redis://[[USER:]PASSWORD@]HOST[:PORT][/DB]` or `http://[USER:PASSWORD@]HOST[:PORT]/PATH`, optionally
    followed by ccache attributes (`|read-only=true`); ValueError says what is wrong, never echoing a password."""
    url, *attrs = value.strip().split("|")
    if not url or any(c.isspace() for c in url):
        raise ValueError("must be one URL (redis://HOST:PORT or http://HOST:PORT/PATH), without spaces")
    parts = urlsplit(url)
    if parts.scheme not in STORE_SCHEMES:
        raise ValueError(f"must start with redis:// or http:// (ccache's remote storages), got "
                         f"{parts.scheme + '://' if parts.scheme else 'no scheme'}")
    hostport = parts.netloc.rpartition("@")[2]
    try:
        host, port = parts.hostname or "", parts.port or STORE_SCHEMES[parts.scheme]
    except ValueError:
        host, port = "", 0
    if not host or not hostport:
        raise ValueError(f"needs a host and, if not the default {STORE_SCHEMES[parts.scheme]}, a port: "
                         f"{parts.scheme}://HOST:PORT")
    pairs = []
    for attr in attrs:
        name, _, val = attr.partition("=")
        if not re.fullmatch(r"[a-z][a-z0-9-]*", name.strip()):
            raise ValueError(f"attribute {attr!r} is not ccache's `|name=value` form (e.g. |read-only=true)")
        pairs.append((name.strip(), val.strip() if _ else "true"))
    return StoreURL(parts.scheme, host, port, "@" in parts.netloc, tuple(pairs))


def component_build(table: Mapping[str, Any], where: str, add: Add) -> tuple[int, int]:
    """(jobs, memory-per-job) of a component table (0 when not set)."""
    return _jobs_and_memory(table, f"{where}.", add)


def _jobs_and_memory(table: Mapping[str, Any], prefix: str, add: Add) -> tuple[int, int]:
    jobs, mem = table.get("jobs", 0), table.get("memory-per-job", "")
    if isinstance(jobs, int) and not isinstance(jobs, bool) and "jobs" in table and jobs <= 0:
        add(f"{prefix}jobs", f"must be a positive number of compile jobs, got {jobs}; remove it to size jobs by memory")
    size = 0
    if isinstance(mem, str) and "memory-per-job" in table:
        try:
            size = parse_size(mem)
        except ValueError:
            add(f"{prefix}memory-per-job", f"{mem!r} is not a size; write it like \"8GiB\", \"3G\" or \"512MiB\"")
    ok_jobs = jobs if isinstance(jobs, int) and not isinstance(jobs, bool) and jobs > 0 else 0
    return ok_jobs, size


def check_job_env(env: Mapping[str, str], where: str, add: Add) -> None:
    """A job variable in a recipe env must be a positive integer (the builds read it as one)."""
    for var in JOB_ENV:
        value = env.get(var)
        if value is not None and not (value.strip().isdigit() and int(value) > 0):
            add(f"{where}.{var}", f"a job count must be a positive integer, got {value!r}; remove it to size "
                                  f"jobs by memory")


__all__ = ["BUILD_KEYS", "COMPILER_CACHES", "STORE_SCHEMES", "BuildSpec", "StoreURL",
           "build_spec", "check_job_env", "component_build", "parse_size", "parse_store_url"]
