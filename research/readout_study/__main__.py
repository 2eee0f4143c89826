from research.readout_study.study import main

raise SystemExit(main())
