from toolchain.cli import main

raise SystemExit(main())
