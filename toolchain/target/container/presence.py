"""What `plan` and `doctor` say of a recipe's container image and engine, pulling nothing: whether the image is
here, else what a build pulls (with its size where the registry says it from the manifest alone, no layer
fetched); and whether the engine starts a trivial container with the recipe's run-args, else the cause and
the fix (`engine.start_failure`, the same words a build's error uses).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

from toolchain.console import UI
from toolchain.core.record import record
from toolchain.recipe.model import TargetSpec
from toolchain.target.container.engine import ENGINES, ContainerError, Engine, Image, StartFailed, image_repo
from toolchain.target.doctor import MISSING, OK, WARN, Finding

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@record
class ImageState:
    """The recipe's image on this engine: here (`present`), or what a build would pull and its size."""
    image: str             # as the recipe names it
    key: str               # the recipe key naming it: target.base or target.image
    present: bool
    size: int = 0          # compressed bytes of its layers, as the registry's manifest says (0: not known)
    why: str = ""          # why the size is not known (the registry could not be asked)

    def line(self) -> str:
        if self.present:
            return f"{self.image}: present"
        size = f"{self.size / (1 << 30):.2f} GiB compressed, as the registry says" if self.size else \
            f"size unknown: {self.why}"
        return f"not present: a build pulls {self.image} ({size})"

    def to_json(self) -> dict[str, object]:
        return {"image": self.image, "key": self.key, "present": self.present, "size": self.size or None,
                "why": self.why, "line": self.line()}


def engine_of(spec: TargetSpec, ui: UI | None = None) -> Engine:
    """The engine a container target spec names, with the recipe's engine arguments."""
    return Engine(ENGINES[spec.runtime], tuple(spec.engine_args), ui)


def image_state(spec: TargetSpec, engine: Engine) -> ImageState | None:
    """The state of the image a fresh container starts from (None for the host or a running container). Asks
    the engine, then (when absent) the registry for the manifest: nothing is pulled."""
    if spec.runtime == "host" or spec.container or not spec.image:
        return None
    key = "target.base" if spec.base else "target.image"
    if engine.inspect_image(spec.image) is not None:
        return ImageState(spec.image, key, True)
    size, why = registry_size(spec.image)
    return ImageState(spec.image, key, False, size, why)


def registry_size(image: str) -> tuple[int, str]:
    """(compressed bytes of the image's layers, "") from the registry's manifest (a manifest list: this
    machine's platform's), or (0, why) when the registry cannot be asked or does not say."""
    from toolchain.sharing.registry import RegistryUnanswered, image_manifest

    try:
        data = image_manifest(image)
        if "manifests" in data:
            arch = ARCH.get(platform.machine(), platform.machine())
            mine = [m for m in data.get("manifests", []) if isinstance(m, dict)
                    and m.get("platform", {}).get("architecture") == arch and m.get("platform", {}).get("os") == "linux"]
            if not mine:
                return 0, f"the registry lists no linux/{arch} image"
            data = image_manifest(f"{image_repo(image)}@{mine[0].get('digest', '')}")
    except RegistryUnanswered as exc:
        return 0, f"the registry could not be asked: {exc}"
    layers = data.get("layers")
    if not isinstance(layers, list):
        return 0, "the registry's manifest lists no layers"
    return sum(int(layer.get("size", 0)) for layer in layers if isinstance(layer, dict)), ""


def container_findings(spec: TargetSpec, ui: UI | None = None) -> tuple[list[Finding], bool]:
    """doctor's lines for a container target: the image, then the engine (it answers, and starts one trivial
    container with the recipe's run-args, as a build starts its own). And whether the target can be entered
    to read its interpreter (the engine works and the image is here: nothing is pulled)."""
    engine = engine_of(spec, ui)
    try:
        engine.check()
    except ContainerError as err:
        image = Finding("image", WARN, f"{spec.image or spec.container}: not looked at ({spec.runtime} does not "
                                       "answer)")
        return [image, Finding("container engine", MISSING, str(err), err.hint or "")], False
    state = image_state(spec, engine)
    findings = []
    if state is not None:
        findings.append(Finding("image", OK if state.present else WARN, f"{state.key}: {state.line()}",
                                "" if state.present else f"`{engine.name} pull {state.image}` fetches it now "
                                                         "(or let the first build do it)"))
    if spec.container:  # exec into a running container: the recipe's run-args do not apply
        return [*findings, Finding("container engine", OK, f"{engine.name} answers")], True
    trial = _trial_image(engine, spec, state)
    if trial is None:
        return [*findings, Finding("container engine", WARN, f"{engine.name} answers; starting a container was not "
                                                              "tried: no image here to start one from, and none "
                                                              "could be made here")], False
    shown = "" if state is not None and state.present else f" (from {trial.name}: the recipe's image is not here)"
    failed = _start(engine, trial, spec.run_args)
    if failed is None:
        return [*findings, Finding("container engine", OK, f"{engine.name} starts a container with the recipe's "
                                                           f"run-args{shown}")], state is None or state.present
    if not spec.run_args or isinstance(failed, str):
        return [*findings, _engine_failed(engine, trial, failed, " with the recipe's run-args")], False
    # the same start without the run-args tells the recipe's run-args apart from the engine's own trouble
    bare = _start(engine, trial, ())
    args = " ".join(spec.run_args)
    if bare is None:
        return [*findings, Finding("run-args", MISSING, f"[target] run-args ({args}): {failed.cause}",
                                   _run_args_fix(failed.cause)),
                Finding("container engine", OK, f"{engine.name} starts a container without the recipe's "
                                                 f"run-args{shown}")], False
    if isinstance(bare, str) or bare.cause == failed.cause:  # the engine's own trouble, whatever the run-args
        return [*findings, _engine_failed(engine, trial, bare, " even without the recipe's run-args")], False
    return [*findings, Finding("run-args", WARN, f"[target] run-args ({args}): {failed.cause}",
                               _run_args_fix(failed.cause) + "; tried again once the engine below starts containers"),
            _engine_failed(engine, trial, bare, " even without the recipe's run-args")], False


def _start(engine: Engine, image: Image, run_args: Sequence[str]) -> StartFailed | str | None:
    """None when a trivial container starts from `image` with `run_args`; else why (StartFailed, or the
    engine's error as text)."""
    try:
        with engine.started("doctor", image, (), run_args):
            return None
    except StartFailed as err:
        return err
    except ContainerError as err:
        return f"{err}" + (f" ({err.hint})" if err.hint else "")


def _engine_failed(engine: Engine, image: Image, failed: StartFailed | str, how: str) -> Finding:
    """The engine's finding for a start that failed."""
    if isinstance(failed, str):
        return Finding("container engine", MISSING, failed)
    return Finding("container engine", MISSING, f"{engine.name} cannot start a container from {image.name}{how}: "
                                                f"{failed.cause}", failed.hint or "")


def _run_args_fix(cause: str) -> str:
    """What to do about run-args the engine refused: a GPU's device on a box without one, or else the args."""
    if "/dev/dri" in cause:
        return ("this box has no /dev/dri (no GPU driver loaded): builds need no card, so drop --device /dev/dri "
                "from [target] run-args in a recipe of your own (extends = the recipe), or load the xe driver")
    return "check [target] run-args (each is passed to the engine's run as written)"


def _trial_image(engine: Engine, spec: TargetSpec, state: ImageState | None) -> Image | None:
    """The recipe's image when it is here, else a tiny image made here offline (container/trial.py): never
    whatever image the engine happens to hold."""
    if state is not None and state.present:
        return engine.inspect_image(spec.image)
    from toolchain.target.container.trial import trial_image

    return trial_image(engine)
