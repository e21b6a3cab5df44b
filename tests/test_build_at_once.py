"""Compiles side by side (build/schedule.py): the scheduler on its own, with real threads, and real builds
through the CLI whose build commands meet at a rendezvous (a build that waits for another to start fails
if the two were not running at the same time) or record when they ran."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.spine_helpers import component, recipe_data
from toolchain.build.schedule import Budget, run_at_once
from toolchain.core.fs import sha256_file

WAIT = 30.0  # seconds a rendezvous waits before it calls the other side missing


# ---- the scheduler ------------------------------------------------------------------------------------

class Meter:
    """Work items that record how many ran at once, and may wait for another item to start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict[str, threading.Event] = {}
        self.ended: dict[str, threading.Event] = {}
        self.order: list[str] = []
        self.now: set[str] = set()
        self.most = 0

    def event(self, name: str) -> threading.Event:
        with self.lock:
            return self.started.setdefault(name, threading.Event())

    def end(self, name: str) -> threading.Event:
        with self.lock:
            return self.ended.setdefault(name, threading.Event())

    def work(self, waits: dict[str, str] | None = None, fails: tuple[str, ...] = (), hold: float = 0.0,
             outlives: dict[str, str] | None = None):
        """`waits`: name -> the item it waits to start; `outlives`: name -> the item it waits to end."""
        def run(item: tuple[str, int]) -> str:
            name = item[0]
            with self.lock:
                self.order.append(name)
                self.now.add(name)
                self.most = max(self.most, len(self.now))
            self.event(name).set()
            try:
                other = (waits or {}).get(name)
                if other and not self.event(other).wait(WAIT):
                    raise AssertionError(f"{other} did not start while {name} ran")
                time.sleep(hold)
                last = (outlives or {}).get(name)
                if last and not self.end(last).wait(WAIT):
                    raise AssertionError(f"{last} did not end while {name} ran")
                if name in fails:
                    raise RuntimeError(f"{name} failed")
                return name.upper()
            finally:
                with self.lock:
                    self.now.discard(name)
                self.end(name).set()
        return run


def memory(item: tuple[str, int]) -> int:
    return item[1]


def test_builds_overlap_as_far_as_the_budget_admits_and_keep_their_order():
    m = Meter()
    items = [("a", 4), ("b", 4), ("c", 4)]
    got = run_at_once(items, m.work(waits={"a": "b", "b": "a"}, hold=0.05), Budget(2, 10), memory)
    assert got == ["A", "B", "C"]  # the results in the items' order
    assert m.most == 2  # a and b met (each waited for the other); c had to wait: 3 x 4 > 10 and at most 2


def test_a_build_whose_memory_does_not_fit_waits_and_nothing_overtakes_it():
    m = Meter()
    items = [("big", 8), ("huge", 9), ("small", 1)]
    run_at_once(items, m.work(outlives={"huge": "small"}), Budget(3, 10), memory)
    # huge (9) does not fit beside big (8): it waits; small (1) would fit but does not overtake it; once huge
    # runs, small fits beside it (huge waits for small to end: it fails if small is not let in meanwhile)
    assert m.most == 2
    assert m.order == ["big", "huge", "small"]


def test_the_first_build_starts_even_when_it_alone_exceeds_the_memory():
    m = Meter()
    assert run_at_once([("a", 50), ("b", 50)], m.work(), Budget(4, 10), memory) == ["A", "B"]
    assert m.most == 1


def test_one_at_once_runs_in_the_calling_thread():
    seen = []
    run_at_once([("a", 0), ("b", 0)], lambda item: seen.append(threading.current_thread()), Budget(1, 1 << 40),
                memory)
    assert seen == [threading.main_thread()] * 2


def test_after_a_failure_nothing_new_starts_running_ones_finish_and_the_first_failure_is_raised():
    m = Meter()
    also: list[str] = []
    items = [("bad", 1), ("slow", 1), ("late", 1)]
    with pytest.raises(RuntimeError, match="bad failed"):
        run_at_once(items, m.work(waits={"bad": "slow"}, fails=("bad",), outlives={"slow": "bad"}), Budget(2, 10), memory,
                    also_failed=lambda item, err: also.append(item[0]))
    assert "late" not in m.order
    assert m.event("slow").is_set()
    assert not m.now
    assert also == []


def test_every_failure_is_told_the_first_in_order_raised():
    m = Meter()
    also: list[str] = []
    with pytest.raises(RuntimeError, match="one failed"):
        run_at_once([("one", 1), ("two", 1)], m.work(waits={"one": "two", "two": "one"}, fails=("one", "two")),
                    Budget(2, 10), memory, also_failed=lambda item, err: also.append(f"{item[0]}: {err}"))
    assert also == ["two: two failed"]


# ---- real builds through the CLI ------------------------------------------------------------------------

STEP = """\
# A build command for the tests: marks when it starts and ends, may wait for other components' builds to
# start (a rendezvous: it fails if they do not start meanwhile), then builds the wheel with pip.
import subprocess, sys, time
from pathlib import Path

name, marks, src, out, *others = sys.argv[1:]
marks = Path(marks)
(marks / f"{name}.start").write_text(repr(time.time()))
deadline = time.time() + WAIT
for other in others:
    while not (marks / f"{other}.start").exists():
        if time.time() > deadline:
            sys.exit(f"{other} did not start while {name} was building")
        time.sleep(0.05)
if name.startswith("bad"):
    sys.exit(f"{name}: a compile error")
subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", src, "-w", out],
               check=True)
(marks / f"{name}.end").write_text(repr(time.time()))
""".replace("WAIT", repr(WAIT))


@pytest.fixture
def stack(ws, make_repo, tmp_path):
    """stack(names, waits={name: [others]}, **component keys by name) -> (recipe name, marks folder)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    step = tmp_path / "step.py"
    step.write_text(STEP)

    def make(names: list[str], waits: dict[str, list[str]] | None = None,
             keys: dict[str, dict] | None = None) -> tuple[str, Path]:
        comps = {}
        for name in names:
            repo = make_repo(name, "tiny")
            repo.commit(f"{name}: its own distribution", {"pyproject.toml": (repo.path / "pyproject.toml").read_text()
                                                           .replace('name = "tiny"', f'name = "tiny-{name}"')})
            comps[name] = component(repo, command=["{python}", str(step), name, str(marks), "{src}", "{out}",
                                                   *(waits or {}).get(name, [])],
                                    dist=f"tiny-{name}", **(keys or {}).get(name, {}))
        ws.recipe("r", recipe_data(comps))
        return "r", marks

    return make


def spans(marks: Path, *names: str) -> list[tuple[float, float]]:
    return [(float((marks / f"{n}.start").read_text()), float((marks / f"{n}.end").read_text())) for n in names]


needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: builds run one at a time")


@needs_two_cores
def test_independent_components_compile_side_by_side(ws, stack):
    recipe, _marks = stack(["one", "two"], waits={"one": ["two"], "two": ["one"]})
    r = ws.build(recipe, "out", "--no-resolve")
    assert r.returncode == 0, r.output  # each build waited for the other to start: they ran at once
    data = r.json()
    assert [c["name"] for c in data["components"]] == ["one", "two"]  # the plan's order, whichever ended first
    lock = ws.lock()
    assert [c["name"] for c in lock["components"]] == ["one", "two"]
    for c in lock["components"]:
        wheel = ws.root / "out" / "wheels" / c["wheel"]["file"]
        assert wheel.name.startswith(f"tiny_{c['name']}-")
        assert sha256_file(wheel) == c["wheel"]["sha256"]


def test_builds_at_once_1_builds_one_after_another(ws, stack):
    recipe, marks = stack(["one", "two"])
    r = ws.build(recipe, "out", "--no-resolve", "--builds-at-once", "1")
    assert r.returncode == 0, r.output
    (_s1, e1), (s2, _e2) = spans(marks, "one", "two")
    assert e1 <= s2  # two started after one ended


@needs_two_cores
def test_a_compile_whose_jobs_need_more_memory_than_there_is_builds_alone(ws, stack):
    recipe, marks = stack(["one", "two", "three"], keys={"two": {"memory-per-job": "100000GiB"}})
    r = ws.build(recipe, "out", "--no-resolve")
    assert r.returncode == 0, r.output
    (_s1, e1), (s2, e2), (s3, _e3) = spans(marks, "one", "two", "three")
    assert e1 <= s2
    assert e2 <= s3


@needs_two_cores
def test_a_failed_compile_lets_the_one_beside_it_finish_into_the_cache_and_starts_nothing_new(ws, stack):
    recipe, marks = stack(["bad", "good", "late"], waits={"bad": ["good"]})
    r = ws.build(recipe, "out", "--no-resolve")
    assert r.returncode == 1, r.output
    assert "bad" in r.stderr
    assert "a compile error" in r.stderr
    assert "Traceback" not in r.stderr
    assert (marks / "good.end").exists()
    assert not (marks / "late.start").exists()
    entries = [json.loads(p.read_text()) for p in ws.cache.glob("wheels/*/*/entry.json")]
    assert [e["component"] for e in entries] == ["good"]  # the rerun after the fix will not compile it again


def test_builds_at_once_must_be_a_positive_number(ws, stack):
    recipe, _ = stack(["one"])
    r = ws.build(recipe, "out", "--builds-at-once", "0")
    assert r.returncode == 2 and "--builds-at-once 0" in r.stderr and "Traceback" not in r.stderr, r.output

