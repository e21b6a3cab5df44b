"""From lock to image: an OCI image of the lock's base (pinned by digest) plus one layer that installs the lock's
wheels as `pip install --force-reinstall --no-deps` would into the base's interpreter, built without a daemon and
reproducibly (`base`: the base image and its interpreter; `layer`: the one layer; `assemble`: config, manifest
and the OCI layout; `deliver`: --oci-dir, --load, --push; `provenance`: the lock read back from an image;
`make`: the whole `toolchain image` in one call)."""
