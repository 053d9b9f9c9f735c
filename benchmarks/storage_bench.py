"""Storage benchmark; the code lives in tidelog.cli.storage_bench (also `tidelog bench storage`)."""
from tidelog.cli.storage_bench import main
raise SystemExit(main())
