"""Releasing a built stack: reproducible bundles (bundle.py), their SBOM (sbom.py), wheel comparison
(wheeldiff.py). Only the constants the CLI names at start-up live here: importing a module of the package
brings in the SBOM writer."""

BUNDLES_DIR = "bundles"  # under a build's --out: `toolchain build --bundle` writes its bundles there
