from model_packaging.cli import main

raise SystemExit(main())
