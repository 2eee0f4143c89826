from research.builds.study import main

raise SystemExit(main())
