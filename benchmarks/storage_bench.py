"""Storage benchmark; the code lives in tidelog.storage.bench (also `tidelog bench storage`)."""
from tidelog.storage.bench import main
raise SystemExit(main())
