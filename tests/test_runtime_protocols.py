"""The runtime's protocols stay small (issue 49; pypa/build's `IsolatedEnv` has 2 members, cibuildwheel's
`OCIContainer` 4): what is a composition of other members (a Python there: `Interpreter(runtime, python, venv)`)
is a function over the protocol, not a member of it. Each protocol declares at most 12 members of its own."""

from __future__ import annotations

from toolchain.target.base import BuildRuntime, Interpreter, Place, ServeRuntime


def _own(protocol: type) -> set[str]:
    """The members a protocol declares itself (methods and annotated attributes), not those it inherits."""
    names = {n for n, v in vars(protocol).items() if callable(v) and (not n.startswith("_") or n in ("__enter__",
                                                                                                  "__exit__"))}
    return names | set(vars(protocol).get("__annotations__", {}))


def test_each_protocol_declares_at_most_12_members_of_its_own():
    sizes = {p.__name__: sorted(_own(p)) for p in (Place, BuildRuntime, ServeRuntime)}
    assert all(len(m) <= 12 for m in sizes.values()), sizes
    assert "interpreter" not in sizes["ServeRuntime"]  # a function of the runtime: Interpreter(runtime, python)


def test_a_python_of_a_runtime_is_made_from_the_runtime_alone():
    from toolchain.target import HostRuntime

    runtime = HostRuntime()
    py = Interpreter(runtime, "python3", "/opt/venv")
    assert (py.runtime, py.python, py.venv) == (runtime, "python3", "/opt/venv")
    assert py.where() == "python3"  # (this machine goes without saying)
