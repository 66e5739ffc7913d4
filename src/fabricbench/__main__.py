from fabricbench.cli import main

raise SystemExit(main())
