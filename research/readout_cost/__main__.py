from research.readout_cost.study import main

raise SystemExit(main())
