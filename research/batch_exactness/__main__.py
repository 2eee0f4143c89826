from research.batch_exactness.study import main

raise SystemExit(main())
