"""A CycloneDX SBOM (JSON, spec 1.6) of a locked stack, written with cyclonedx-python-lib.

One component per locked component: the wheel's name, version and sha256, a purl carrying the VCS URL and
commit, a VCS external reference, a pedigree with the commit and the patch series (path and sha256), and
the pre-fetched CMake sources as sub-components. The stack itself is the metadata component; `after`
becomes the dependency graph. The document is deterministic: fixed serial number (derived from the lock's
wheel hashes), timestamp (the stack's source date) and bom-refs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping

from cyclonedx.model import (
    AttachedText,
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import (
    Commit,
    Component,
    ComponentType,
    Diff,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output import make_outputter
from cyclonedx.schema import OutputFormat, SchemaVersion
from packageurl import PackageURL

from toolchain import __version__
from toolchain.lock import Lock, LockedComponent, wheel_name_version

SBOM_NAME = "sbom.cdx.json"
SCHEMA_VERSION = SchemaVersion.V1_6
_NAMESPACE = uuid.UUID("6f1c7a0e-5b9e-4a53-9f0c-2e1d3a4b5c6d")  # serial numbers are uuid5 in this namespace


def sbom_json(lock: Lock, *, epoch: int, stack_version: str = "",
              patch_texts: Mapping[str, str] | None = None) -> str:
    """The SBOM of `lock` as a JSON document. `patch_texts` ({patch label: text}) embeds the patches."""
    return make_outputter(build_bom(lock, epoch=epoch, stack_version=stack_version, patch_texts=patch_texts),
                          OutputFormat.JSON, SCHEMA_VERSION).output_as_string(indent=2) + "\n"


def build_bom(lock: Lock, *, epoch: int, stack_version: str = "",
              patch_texts: Mapping[str, str] | None = None) -> Bom:
    """The CycloneDX bill of materials of a lock: the stack, its components, their patches and closure."""
    tools = ToolRepository(components=[Component(
        name="toolchain", version=lock.tool_version or __version__, type=ComponentType.APPLICATION,
        bom_ref="tool:toolchain")])
    stack = Component(name=lock.recipe_name, version=stack_version or None, type=ComponentType.APPLICATION,
                      bom_ref=f"stack:{lock.recipe_name}",
                      properties=[Property(name="toolchain:recipe-sha256", value=lock.recipe_sha256),
                                  *_props("toolchain:normalization", lock.normalizations)])
    metadata = BomMetaData(tools=tools, component=stack,
                           timestamp=dt.datetime.fromtimestamp(epoch, tz=dt.UTC),
                           properties=_target_properties(lock))
    serial = uuid.uuid5(_NAMESPACE, "\n".join(f"{c.name} {c.wheel.sha256}" for c in lock.components))
    bom = Bom(metadata=metadata, serial_number=serial)
    by_name = {}
    for comp in lock.components:
        by_name[comp.name] = _component(comp, patch_texts or {})
        bom.components.add(by_name[comp.name])
    for comp in lock.components:
        bom.register_dependency(by_name[comp.name], [by_name[a] for a in comp.after if a in by_name])
    bom.register_dependency(stack, list(by_name.values()))
    return bom


def _component(comp: LockedComponent, patch_texts: Mapping[str, str]) -> Component:
    name, version = wheel_name_version(comp.wheel.file)
    if comp.prebuilt:  # a released wheel: where it was downloaded from, not a commit
        url = str(comp.prebuilt.get("url", ""))
        return Component(
            name=name, version=version, type=ComponentType.LIBRARY, bom_ref=f"component:{comp.name}",
            purl=PackageURL(type="pypi", name=name, version=version),
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=comp.wheel.sha256)],
            external_references=[ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(url))],
            properties=[Property(name="toolchain:component", value=comp.name),
                        Property(name="toolchain:prebuilt", value=str(comp.prebuilt.get("requirement") or url)),
                        Property(name="toolchain:wheel", value=comp.wheel.file)])
    vcs = f"git+{comp.url}@{comp.commit}"
    purl = PackageURL(type="pypi", name=name, version=version, qualifiers={"vcs_url": vcs},
                      subpath=comp.subdir or None)
    patches = [Patch(type=PatchClassification.UNOFFICIAL,
                     diff=Diff(url=XsUri(p.url if p.remote else f"patches/{p.path}"),
                               text=AttachedText(content=patch_texts[p.label]) if p.label in patch_texts else None))
               for p in comp.patches]
    pedigree = Pedigree(commits=[Commit(uid=comp.commit, url=XsUri(comp.url))], patches=patches or None,
                        notes=f"built from {comp.describe or comp.commit}" + (
                            f" with {len(patches)} patch(es)" if patches else ""))
    return Component(
        name=name, version=version, type=ComponentType.LIBRARY, bom_ref=f"component:{comp.name}", purl=purl,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=comp.wheel.sha256)],
        external_references=[_vcs_ref(comp.url, comp.commit)],
        pedigree=pedigree,
        properties=[
            Property(name="toolchain:component", value=comp.name),
            Property(name="toolchain:commit", value=comp.commit),
            Property(name="toolchain:wheel", value=comp.wheel.file),
            Property(name="toolchain:wheel-size", value=str(comp.wheel.size)),
            Property(name="toolchain:cache-key", value=comp.cache_key),
            *([Property(name="toolchain:subdir", value=comp.subdir)] if comp.subdir else []),
            *[Property(name=f"toolchain:patch-sha256:{p.label}", value=p.sha256) for p in comp.patches],
        ],
        components=[_fetchcontent(comp.name, f) for f in comp.fetchcontent] or None,
    )


def _fetchcontent(owner: str, dep: Mapping[str, str]) -> Component:
    name = dep.get("name", "?")
    return Component(name=name, type=ComponentType.LIBRARY, bom_ref=f"fetchcontent:{owner}:{name}",
                     version=dep.get("commit") or None,
                     external_references=[_vcs_ref(dep["url"], dep.get("commit", ""))] if dep.get("url") else None,
                     pedigree=Pedigree(commits=[Commit(uid=dep["commit"])]) if dep.get("commit") else None)


def _vcs_ref(url: str, commit: str) -> ExternalReference:
    return ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(url), comment=f"commit {commit}")


def _target_properties(lock: Lock) -> list[Property]:
    fields = {"python-version": lock.target.python_version, "platform": lock.target.platform,
              "torch-version": lock.target.torch_version, "image-digest": lock.target.image_digest,
              "oneapi-version": lock.toolchain.oneapi_version}
    return [Property(name=f"toolchain:target:{k}", value=v) for k, v in fields.items() if v]


def _props(name: str, values: Iterable[str]) -> list[Property]:
    return [Property(name=name, value=v) for v in values]
