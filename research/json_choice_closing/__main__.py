from research.json_choice_closing.study import main

raise SystemExit(main())
