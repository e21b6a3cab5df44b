"""Classify a failed run with the known failure signatures in `toolchain/data/failure_signatures.toml`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

from toolchain.core import toml as tomlio
from toolchain.core.record import field, record, replace
from toolchain.core.serial import meta
from toolchain.errors import RecipeError

SOURCES = ("log", "response", "event")
FIX_KINDS = ("env", "serve-arg", "patch", "recipe", "action")
EVIDENCE_CHARS = 300


@record
class Fix:
    """A suggested fix for a known failure: what to do, and the env values or server flags it sets."""
    kind: str
    text: str
    env: Mapping[str, str] = field(default_factory=dict, metadata=meta(omit_default=True))
    args: tuple[str, ...] = field(default=(), metadata=meta(omit_default=True))

    def short(self) -> str:
        """The fix in one line: its kind, the env values or flags it sets, and why."""
        what = " ".join(f"{k}={v}" for k, v in self.env.items()) or " ".join(self.args)
        return f"{self.kind}: {what} ({self.text})" if what else f"{self.kind}: {self.text}"


@record(kw_only=True)
class Signature:
    """A known failure: the log patterns that identify it, and the logs they are searched in."""
    id: str
    title: str
    patterns: tuple[re.Pattern[str], ...]
    sources: tuple[str, ...]
    diagnosis: str
    fixes: tuple[Fix, ...]
    marks: tuple[str, ...] = ()
    fallback: bool = False          # only when no other signature matched (a generic "HTTP 500")
    extract: re.Pattern[str] | None = None  # a `(?P<line>...)` the failure printed near it: "{line}" in fix texts


@record
class Finding:
    """A known failure found in a log: its diagnosis, where it was seen, and the fixes to try."""
    id: str
    title: str
    diagnosis: str
    source: str
    evidence: str
    marks: tuple[str, ...]
    fixes: tuple[Fix, ...]
    # what the signature's `extract` took from the text (the line to add)
    extracted: str = field(default="", metadata=meta(omit_default=True))


def default_path() -> Path:
    """The shipped file of failure signatures (data/failure_signatures.toml)."""
    return Path(str(resources.files("toolchain") / "data" / "failure_signatures.toml"))


def load_signatures(path: Path | None = None) -> tuple[Signature, ...]:
    """The failure signatures of a TOML file (the shipped one by default), checked as they are read."""
    path = path or default_path()
    try:
        data = tomlio.load_file(path)
    except (OSError, tomlio.TOMLDecodeError) as exc:
        raise RecipeError(f"{path}: cannot read failure signatures: {exc}") from None
    problems: list[str] = []
    sigs: list[Signature] = []
    for i, raw in enumerate(data.get("signature", [])):
        where = f"{path}: signature #{i + 1} ({raw.get('id', '?')})"
        missing = [k for k in ("id", "title", "patterns", "diagnosis", "fixes") if k not in raw]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
            continue
        patterns = []
        for p in raw["patterns"]:
            try:
                patterns.append(re.compile(p, re.MULTILINE))
            except re.error as exc:
                problems.append(f"{where}: pattern {p!r}: {exc}")
        sources = tuple(raw.get("sources", SOURCES))
        problems += [f"{where}: unknown source {s!r} (use {', '.join(SOURCES)})" for s in sources if s not in SOURCES]
        fixes = []
        for f in raw["fixes"]:
            if f.get("kind") not in FIX_KINDS:
                problems.append(f"{where}: fix kind {f.get('kind')!r} is not one of {', '.join(FIX_KINDS)}")
                continue
            fixes.append(Fix(f["kind"], f.get("text", ""), dict(f.get("env", {})), tuple(f.get("args", ()))))
        extract = None
        if raw.get("extract"):
            try:
                extract = re.compile(raw["extract"], re.MULTILINE)
            except re.error as exc:
                problems.append(f"{where}: extract {raw['extract']!r}: {exc}")
            if extract is not None and "line" not in extract.groupindex:
                problems.append(f"{where}: extract needs a (?P<line>...) group")
        sigs.append(Signature(id=raw["id"], title=raw["title"], patterns=tuple(patterns), sources=sources,
                              diagnosis=raw["diagnosis"], fixes=tuple(fixes),
                              marks=tuple(raw.get("marks", ())), fallback=bool(raw.get("fallback", False)),
                                  extract=extract))
    if problems:
        raise RecipeError(problems)
    return tuple(sigs)


def triage(signatures: Iterable[Signature], *, log: str = "", responses: Iterable[str] = (),
           events: Iterable[str] = ()) -> list[Finding]:
    """One finding per matching signature, in signature order, with the line that matched. A fallback
    signature counts only when nothing else matched."""
    texts = {"log": log, "response": "\n".join(responses), "event": "\n".join(events)}
    findings: list[Finding] = []
    fallbacks: list[Finding] = []
    for sig in signatures:
        hit = _first_match(sig, texts)
        if hit is not None:
            source, line, after = hit
            extracted = ""
            if sig.extract is not None:
                m = sig.extract.search(after)
                extracted = m.group("line").strip()[:EVIDENCE_CHARS] if m else ""
            fixes = tuple(replace(f, text=f.text.replace("{line}", extracted or "the line it printed"))
                          for f in sig.fixes)
            (fallbacks if sig.fallback else findings).append(
                Finding(sig.id, sig.title, sig.diagnosis, source=source, evidence=line, marks=sig.marks, fixes=fixes,
                        extracted=extracted))
    return findings or fallbacks


def _first_match(sig: Signature, texts: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(source, the matching line, the text from that line on: what `extract` searches)."""
    for source in sig.sources:
        text = texts.get(source, "")
        if not text:
            continue
        for pattern in sig.patterns:
            m = pattern.search(text)
            if m:
                start = text.rfind("\n", 0, m.start()) + 1
                end = text.find("\n", m.end())
                line = text[start:end if end != -1 else len(text)].strip()
                return source, line[:EVIDENCE_CHARS], text[start:start + 4000]
    return None
