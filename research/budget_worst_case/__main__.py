from research.budget_worst_case.study import main

raise SystemExit(main())
