"""`@record` (toolchain/core/record.py) behaves as `@dataclass(frozen=True)` does: the same equality, hash,
repr, frozenness and dataclass API, for the same class written both ways."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from dataclasses import FrozenInstanceError, dataclass, field

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
