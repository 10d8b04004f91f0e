from console.entry import main

raise SystemExit(main())
