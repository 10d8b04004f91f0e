from console.cli import main

raise SystemExit(main())
