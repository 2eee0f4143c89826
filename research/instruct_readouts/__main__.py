from research.instruct_readouts.prompts import main

raise SystemExit(main())
