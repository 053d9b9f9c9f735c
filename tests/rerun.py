"""``make test``'s second chance for a few failed tests, the rule of Kafka's own CI
(Gradle's test-retry plugin with ``-PmaxTestRetries=1 -PmaxTestRetryFailures=3``).

After the parallel phase, the tests it recorded as failed (pytest's ``lastfailed``
cache) are run once more, alone in one process, if there are at most ``MAX_FAILURES``
of them; more than that is a broken change, not a busy machine, and nothing is retried.
A test that passes only the second time is printed as FLAKY: the run passes, and the
test is named in the output as work to do (docs/testing.md, "Retried tests")."""

import json
import pathlib
import subprocess
import sys

MAX_FAILURES = 3
LASTFAILED = pathlib.Path(".pytest_cache/v/cache/lastfailed")


def main() -> int:
    failed = sorted(json.loads(LASTFAILED.read_text())) if LASTFAILED.exists() else []
    if not failed:
        print("make test: the parallel phase failed but recorded no failed test; not retried")
        return 1
    if len(failed) > MAX_FAILURES:
        print(f"make test: {len(failed)} tests failed (more than {MAX_FAILURES}); not retried")
        return 1
    print(f"make test: retrying {len(failed)} failed test(s) once, alone:", *failed, sep="\n  ")
    status = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *failed])
    if status == 0:
        print("FLAKY: failed in the parallel phase, passed when run again alone:", *failed, sep="\n  ")
    return status


if __name__ == "__main__":
    sys.exit(main())
