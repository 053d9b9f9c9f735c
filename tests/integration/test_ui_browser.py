"""The web view in a real browser (headless Chromium through Selenium): it shows a
3-broker cluster, then a broker killed with the page's own fault-drill button (the
view started with ``--drills``: the page sends the token of its URL) as fenced and
its partition's new leader within seconds. Screenshots go to ``test-artifacts/``
(or $TIDELOG_ARTIFACTS)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

webdriver = pytest.importorskip("selenium.webdriver")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver (make test installs them)")
ARTIFACTS = os.environ.get("TIDELOG_ARTIFACTS") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                                 "test-artifacts")
BROKERS = (1, 2, 3)


def _browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _text(driver, element_id: str) -> str:
    from selenium.common.exceptions import StaleElementReferenceException
    try:
        return driver.find_element("id", element_id).text
    except StaleElementReferenceException:      # re-rendered while read: the wait loop asks again
        return ""


def _wait_for(driver, condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    _shot(driver, "timeout")
    raise AssertionError(f"the page did not show {what} within {timeout_s:g} s:\n{driver.find_element('tag name', 'main').text}")


def _shot(driver, name: str) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, f"ui-{name}.png")
    driver.save_screenshot(path)
    return path


def _broker_row(driver, node_id: int) -> str:
    from selenium.common.exceptions import StaleElementReferenceException
    try:
        for row in driver.find_elements("css selector", "#brokers tbody tr"):
            cells = row.find_elements("tag name", "td")
            if cells and cells[0].text.split()[0] == str(node_id):
                return row.text
    except StaleElementReferenceException:      # the table was re-rendered while read
        pass
    return ""


def _process(cluster, node_id: int) -> str:
    from tidelog.cluster import ProcessCluster
    return ProcessCluster.load(cluster.directory).layout.node(node_id).process_state()


def test_the_page_shows_the_cluster_and_a_killed_broker_fenced_with_a_new_leader():
    with Cluster(brokers=3, metrics=True, overrides={"broker.session.timeout.ms": "3000",
                                                     "broker.heartbeat.interval.ms": "500"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("ui-orders", 1, 3)])["ui-orders"].result(15)
        wait_until(lambda: len(admin.list_topics("ui-orders", timeout=10).topics["ui-orders"].partitions[0].isrs) == 3,
                   what="ui-orders in sync")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(500):
            producer.produce("ui-orders", b"order-%d" % i, partition=0)
        assert producer.flush(30) == 0
        args = [sys.executable, "-m", "tidelog.cli.main", "ui", "-b", cluster.bootstrap, "--port", "0",
                "--cluster-dir", cluster.directory, "--drills"]
        ui = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        driver = None
        try:
            seen = []
            for line in ui.stdout:                 # log lines may come before the ready line
                seen.append(line)
                match = re.search(r"tidelog ui ready: (http://\S+)", line)
                if match or len(seen) > 50:
                    break
            assert match, "".join(seen)
            url = match.group(1)
            driver = _browser()
            driver.get(url)
            assert driver.title == "tidelog cluster"
            _wait_for(driver, lambda: all("unfenced" in _broker_row(driver, b) for b in BROKERS)
                      and _text(driver, "partitions").count("leo 500") == 3,
                      "three unfenced brokers and ui-orders-0 at offset 500 on every replica")
            assert "lag" not in _text(driver, "partitions")
            _wait_for(driver, lambda: _text(driver, "status") == "live", "the stream live")
            leader = admin.list_topics("ui-orders", timeout=10).topics["ui-orders"].partitions[0].leader
            _wait_for(driver, lambda: f"leader {leader}" in _text(driver, "partitions"), f"leader {leader}")
            _shot(driver, "cluster")

            assert "token=" in url                 # drills on: the page has the view's token
            killed_at = time.monotonic()
            button = driver.find_element("css selector", f'button[data-action="kill"][data-node="{leader}"]')
            assert button.is_displayed()
            button.click()
            _wait_for(driver, lambda: _process(cluster, leader) == "dead", f"broker {leader} killed by the button")
            _wait_for(driver, lambda: "FENCED" in _broker_row(driver, leader)
                      and re.search(r"ui-orders-0\s+leader (\d+)", _text(driver, "partitions")) is not None
                      and re.search(r"ui-orders-0\s+leader (\d+)", _text(driver, "partitions")).group(1)
                      not in (str(leader), "-1"),
                      f"broker {leader} fenced and a new leader for ui-orders-0", timeout_s=30)
            shown_after_s = time.monotonic() - killed_at
            _wait_for(driver, lambda: "leader_election" in _text(driver, "timeline")
                      and f"leader {leader} →" in _text(driver, "timeline"), "the election in the timeline")
            _shot(driver, "after-kill")
            assert shown_after_s < 30
        finally:
            if driver is not None:
                driver.quit()
            ui.terminate()
            ui.wait(10)
