"""Controller test options: ``--rewrite`` regenerates scenario expectations."""


def pytest_addoption(parser):
    try:
        parser.addoption("--rewrite", action="store_true", default=False,
                         help="rewrite tests/controller/scenarios/*.txt with the actual output")
    except ValueError:
        pass   # another conftest already defines --rewrite
