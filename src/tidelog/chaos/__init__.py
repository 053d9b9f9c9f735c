"""tidelog.chaos — fault injection on real broker processes.

``proxy.py`` puts a loopback TCP proxy in front of every node so any link can be
cut; ``nemesis.py`` kills, pauses, restarts and partitions on a schedule;
``run.py`` drives real clients (confluent-kafka) through it and ``checker.py``
judges what they saw. ``python -m tidelog.chaos`` runs it; ``tests/chaos`` runs
the short form in CI. docs/reliability.md reports the figures.
"""
