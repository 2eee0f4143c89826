from research.letter_spellings.study import main

raise SystemExit(main())
