"""The broker's client quota manager (broker/quotas.py), stepped with a fake clock: which
quota applies (Kafka's resolution order), who shares it, the windowed rate and the
throttle time Kafka computes."""

from __future__ import annotations

import pytest

from tidelog.broker.quotas import ClientQuotaManager, ClientQuotas, Rate

# The eight levels, most specific first (Kafka's DefaultQuotaCallback): (user, client-id)
# parts, None = the default entity, absent = not part of the entity.
LEVELS = [
    ((("user", "alice"), ("client-id", "app")), 1.0),
    ((("user", "alice"), ("client-id", None)), 2.0),
    ((("user", "alice"),), 3.0),
    ((("user", None), ("client-id", "app")), 4.0),
    ((("user", None), ("client-id", None)), 5.0),
    ((("user", None),), 6.0),
    ((("client-id", "app"),), 7.0),
    ((("client-id", None),), 8.0),
]


def manager_with(levels) -> ClientQuotaManager:
    manager = ClientQuotaManager("producer_byte_rate")
    manager.update_quotas({tuple(sorted(entity)): {"producer_byte_rate": value} for entity, value in levels})
    return manager


@pytest.mark.parametrize("first", range(len(LEVELS)))
def test_the_most_specific_configured_level_applies(first):
    manager = manager_with(LEVELS[first:])
    tags = manager.quota_metric_tags("alice", "app")
    assert manager.quota_limit(*tags) == LEVELS[first][1]
    # Who shares the usage: a user-only quota is the user's across its client ids, a
    # client-id-only one the client id's across users; the others are per (user, client id).
    expected = {2: ("alice", ""), 5: ("alice", ""), 6: ("", "app"), 7: ("", "app")}.get(first, ("alice", "app"))
    assert tags == expected


def test_no_quota_means_no_throttle_and_other_keys_are_ignored():
    manager = ClientQuotaManager("producer_byte_rate")
    manager.update_quotas({(("user", "alice"),): {"consumer_byte_rate": 1.0}, (("ip", "10.0.0.1"),): {
        "connection_creation_rate": 1.0}})
    assert manager.record("alice", "app", 10 ** 9, 0) == 0
    assert manager.max_value_in_window("alice", "app") is None


def test_throttle_time_brings_the_rate_back_to_the_quota():
    """Quota 1000 B/s over 11 x 1 s: the rate is taken over at least 10 s, so 5000 B at once is
    500 B/s (fine) and 15000 B is 1500 B/s: (1500 - 1000) / 1000 x 10 s = 5 s of throttle."""
    manager = manager_with([((("client-id", "app"),), 1000.0)])
    assert manager.record("u", "app", 5000, 0) == 0
    assert manager.record("u", "app", 10000, 0) == 5000
    # The usage is forgotten once its samples are older than the 11 windows.
    assert manager.record("u", "app", 1, 11_000) == 0
    # The largest request that cannot be throttled on its own: quota x 10 windows.
    assert manager.max_value_in_window("u", "app") == 10_000


def test_unrecord_takes_back_a_throttled_fetch():
    manager = manager_with([((("client-id", "c"),), 100.0)])
    assert manager.record("u", "c", 2000, 0) == 10_000          # 200 B/s: throttled 10 s
    manager.unrecord("u", "c", 2000, 0)
    assert manager.record("u", "c", 1, 0) == 0


def test_a_user_quota_is_shared_and_a_default_user_quota_is_each_users():
    shared = manager_with([((("user", "alice"),), 100.0)])
    assert shared.record("alice", "one", 800, 0) == 0           # 80 B/s
    assert shared.record("alice", "two", 800, 0) > 0            # 160 B/s for alice's clients together
    own = manager_with([((("user", None),), 100.0)])
    assert own.record("alice", "one", 800, 0) == 0
    assert own.record("bob", "one", 800, 0) == 0                # bob has his own 100 B/s


def test_rate_windows_as_kafkas_sampled_stat():
    rate = Rate(samples_num=3, window_ms=1000, now_ms=0)
    rate.record(100, 0)
    assert rate.window_size_ms(0) == 2000 and rate.measure(0) == 50.0      # at least 2 full windows
    rate.record(100, 1500)                                                  # a second sample
    assert rate.window_size_ms(1500) == 2500 and rate.measure(1500) == 80.0
    rate.record(100, 2600)
    rate.record(100, 3700)                                                  # the 4th slot (the overlapping one)
    # The first sample (last event at 0) is 3 windows old at 3700: purged; the rate is the
    # other three over the time since the oldest kept one started (1500).
    assert rate.window_size_ms(3700) == 2200 and rate.measure(3700) == pytest.approx(300 / 2.2)
    assert rate.measure(3000 + 3700) == 0.0                                 # all samples expired


def test_new_quotas_from_an_image_keep_the_usage():
    quotas = ClientQuotas()
    image_quotas = {(("client-id", "app"),): {"producer_byte_rate": 1000.0}}
    quotas.on_image(image_quotas)
    assert quotas.produce.record("u", "app", 9000, 0) == 0
    quotas.on_image({(("client-id", "app"),): {"producer_byte_rate": 500.0}})
    assert quotas.produce.record("u", "app", 0, 0) == 8000                  # 900 B/s against 500
    assert quotas.fetch.quotas == {} and quotas.request.quotas == {}


def test_idle_clients_are_forgotten():
    manager = manager_with([])
    manager.record("u", "app", 1, 0)
    manager.expire_sensors(3_599_999)
    assert manager.sensors
    manager.expire_sensors(3_600_000)
    assert not manager.sensors


def test_controller_mutations_take_tokens_from_a_bucket_that_refills_at_the_quota():
    """controller_mutation_rate 2/s over 11 x 1 s: a 22-token bucket. 30 partitions at once
    leave it 8 short (4 s of refill); it refills at 2 per second, up to 22 again."""
    manager = ClientQuotas().controller_mutation
    manager.update_quotas({(("client-id", "admin"),): {"controller_mutation_rate": 2.0}})
    assert manager.throttle_time_ms("u", "admin", 0) == 0
    assert manager.record("u", "admin", 30, 0) == 4000
    assert manager.throttle_time_ms("u", "admin", 1000) == 3000
    assert manager.throttle_time_ms("u", "admin", 4000) == 0
    assert manager.record("u", "admin", 22, 100_000) == 0           # full again, not more
    assert manager.record("u", "admin", 1, 100_000) == 500
    assert manager.record("u", "other", 10 ** 6, 0) == 0            # no quota for this client id
