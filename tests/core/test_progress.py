"""cli.progress: a live line on a terminal, nothing when the output is piped."""

import io

from tidelog.cli.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_piped_output_gets_no_progress():
    out = io.StringIO()
    with Progress("starting", total=3, stream=out) as progress:
        for _ in range(3):
            progress.advance(note="broker ready")
    assert out.getvalue() == ""


def test_a_terminal_gets_a_live_line_that_shows_the_count():
    out = Tty()
    with Progress("starting", total=3, stream=out) as progress:
        progress.advance(2, note="broker 2 ready")
        progress._progress.refresh()
        shown = out.getvalue()
    assert "starting: broker 2 ready" in shown and "2/3" in shown
