from tpmtop.cli import main

raise SystemExit(main())
