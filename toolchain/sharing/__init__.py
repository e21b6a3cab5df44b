"""Sharing builds between machines: the one OCI registry client (`registry` over `transport`, credentials from
`auth`), which remote wheel cache a build uses (`settings`), which entries `cache prune` deletes (`retention`),
and ccache's remote storage (`compilerstore`). Below `target/` and `build/`, which both speak to registries."""
