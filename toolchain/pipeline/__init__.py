"""The pipeline in one call, in four rooms: `build` (recipe → plan → built components → lock), `outdir` (the
output directory the tool owns), `verify` (the recipe a lock records, every hash checked; what a rebuild
recorded differently), `relock` (`toolchain lock`), with `audit` (the native audit both build and relock
run). The names callers use are re-exported here."""

from toolchain.pipeline.audit import audit_closure, audit_native
from toolchain.pipeline.build import build_stack, build_stack_components
from toolchain.pipeline.outdir import check_dir, check_out_dir
from toolchain.pipeline.relock import relock
from toolchain.pipeline.verify import recipe_from_lock

__all__ = ["audit_closure", "audit_native", "build_stack", "build_stack_components", "check_dir", "check_out_dir",
           "recipe_from_lock", "relock"]
