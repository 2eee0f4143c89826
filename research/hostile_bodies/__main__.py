from research.hostile_bodies.study import main

raise SystemExit(main())
