"""The pipeline in one call, in four rooms: `build` (recipe → plan → built components → lock), `outdir` (the
output directory the tool owns), `verify` (the recipe a lock records, every hash checked; what a rebuild
recorded differently), `relock` (`toolchain lock`), with `audit` (the native audit both build and relock
run). Callers import from the room (`from toolchain.pipeline.build import build_stack`): this package
re-exports nothing, so that importing one room (`outdir`, say) loads none of the others (and the name
`relock`, the room and its function, means one thing)."""
