"""`@record` (toolchain/core/record.py) behaves as `@dataclass(frozen=True)` does: the same equality, hash,
repr, frozenness and dataclass API, for the same class written both ways."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest

from toolchain.core.record import record


def _body(deco):  # the same class, made by `deco`
    @deco
    class Item:
        """An item."""

        name: str
        size: int = 0
        tags: tuple[str, ...] = ()
        note: str = field(default="", compare=False)
        extra: dict[str, str] = field(default_factory=dict, hash=False, repr=False)

        @functools.cached_property
        def label(self) -> str:
            return f"{self.name}:{self.size}"

    return Item


Rec = _body(record)
Dc = _body(dataclass(frozen=True))


@pytest.mark.parametrize("cls", [Rec, Dc], ids=["record", "dataclass"])
def test_a_record_answers_as_a_frozen_dataclass(cls):
    a = cls("a", 1, ("x",), note="n1", extra={"k": "v"})
    same = cls("a", 1, ("x",), note="other note", extra={"k": "v"})
    assert a == same and hash(a) == hash(cls("a", 1, ("x",), extra={"other": "x"}))
    assert a != cls("a", 2, ("x",)) and a != ("a", 1) and (a == object()) is False
    assert repr(a) == f"{cls.__qualname__}(name='a', size=1, tags=('x',), note='n1')"
    assert a.label == "a:1"  # (a cached_property writes past the frozen __setattr__)
    for change in (lambda: setattr(a, "size", 2), lambda: setattr(a, "other", 1), lambda: delattr(a, "name")):
        with pytest.raises(FrozenInstanceError):
            change()
    b = dataclasses.replace(a, size=5)
    assert (b.size, b.name, a.size) == (5, "a", 1)
    assert dataclasses.asdict(a) == {"name": "a", "size": 1, "tags": ("x",), "note": "n1", "extra": {"k": "v"}}
    assert dataclasses.is_dataclass(a) and [f.name for f in dataclasses.fields(a)] == [
        "name", "size", "tags", "note", "extra"]
    assert {a: 1}[same] == 1


def test_records_and_dataclasses_agree_on_the_same_values():
    args = [("a",), ("a", 2, ("t", "u")), ("b", 0, (), "note")]
    for one in args:
        r, d = Rec(*one), Dc(*one)
        assert repr(r).replace("Rec", "") == repr(d).replace("Dc", "")
        assert hash(r) == hash(d)
        for other in args:
            assert (Rec(*one) == Rec(*other)) == (Dc(*one) == Dc(*other))
    assert Rec("a") != Dc("a")  # another class is never equal


def test_a_record_goes_through_pickle():
    from toolchain.build.cache import WheelRef  # (a record the tool defines at module level)

    ref = WheelRef("w-1-py3-none-any.whl", "0" * 64, 3)
    back = pickle.loads(pickle.dumps(ref))
    assert back == ref and hash(back) == hash(ref)
    with pytest.raises(FrozenInstanceError):
        back.size = 4


def test_a_keyword_only_record_takes_its_fields_by_name_alone():
    Kw = _body(record(kw_only=True))
    a = Kw(name="a", size=1)
    assert a == Kw(size=1, name="a") == dataclasses.replace(a)
    assert hash(a) == hash(Kw(name="a", size=1))
    assert repr(a).endswith("Item(name='a', size=1, tags=(), note='')")
    with pytest.raises(TypeError):
        Kw("a", 1)
    with pytest.raises(FrozenInstanceError):
        a.size = 2


_HALF_IMPORTED = r'''
import importlib.util, sys, threading
from toolchain.core import record as rec
from toolchain.core.serial import to_data

inside, go_on = threading.Event(), threading.Event()
real = importlib.util.find_spec("dataclasses")

class Slow:  # the real dataclasses module, its body run while another thread asks about records
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        inside.set()
        go_on.wait(30)
        real.loader.exec_module(module)

class Finder:
    def find_spec(self, name, path=None, target=None):
        if name != "dataclasses":
            return None
        sys.meta_path.remove(self)
        return importlib.util.spec_from_loader("dataclasses", Slow(), origin=real.origin)

assert "dataclasses" not in sys.modules, "the test needs an interpreter that has not imported dataclasses"
sys.meta_path.insert(0, Finder())
importer = threading.Thread(target=__import__, args=("dataclasses",))
importer.start()
assert inside.wait(30)
assert "dataclasses" in sys.modules  # half made: what another thread sees now

@rec.record
class Item:
    name: str
    size: int = 0

item = Item("a", 2)
print(rec.is_dataclass(item), rec.is_dataclass(object()), [f.name for f in rec.fields(item)], to_data(item))
go_on.set()
importer.join()
import dataclasses
@dataclasses.dataclass(frozen=True)
class Theirs:
    x: int = 1
print(rec.is_dataclass(Theirs()), [f.name for f in rec.fields(Theirs())])
'''


def test_records_are_read_while_another_thread_is_still_importing_dataclasses(tmp_path):
    """Two builds in threads: one asked whether a value is a dataclass while the other was importing `dataclasses`
    (CI: "partially initialized module 'dataclasses' has no attribute 'is_dataclass'", a build's traceback)."""
    import subprocess
    import sys

    script = tmp_path / "half.py"
    script.write_text(_HALF_IMPORTED)
    out = subprocess.run([sys.executable, "-S", str(script)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True False ['name', 'size'] {'name': 'a', 'size': 2}", "True ['x']"]
