"""The Spark source and sink over SASL_SSL, with Spark's Kafka connector options
(kafka.security.protocol, kafka.sasl.mechanism, kafka.sasl.jaas.config, kafka.ssl.*):
a SCRAM-SHA-512 user writes a DataFrame and reads it back in a batch query."""

import subprocess
import sys

import pytest
import trustme

from tidelog.testing import Broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("spark-tls")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    overrides = {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(directory / "server.pem"),
                 "ssl.truststore.location": str(directory / "ca.pem"), "sasl.jaas.config": JAAS,
                 "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}
    with Broker(overrides=overrides) as broker:
        admin = directory / "admin.properties"
        admin.write_text(f"security.protocol=SASL_SSL\nssl.truststore.location={directory / 'ca.pem'}\n"
                         "sasl.mechanism=PLAIN\nsasl.username=admin\nsasl.password=admin-secret\n")
        for command in (["users", "add", "spark", "--password", "spark-secret"],
                        ["topics", "create", "secured", "--partitions", "2"]):
            done = subprocess.run([sys.executable, "-m", "tidelog.cli.main", command[0], "-b", broker.bootstrap,
                                   "--command-config", str(admin), *command[1:]], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
        yield broker, directory


def options(broker, directory) -> dict:
    return {"kafka.bootstrap.servers": broker.bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.truststore.location": str(directory / "ca.pem"), "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                      'username="spark" password="spark-secret";'}


def test_a_batch_write_and_read_over_sasl_ssl_with_scram(spark, secured):
    broker, directory = secured
    rows = [(str(i), f"value-{i}") for i in range(50)]
    (spark.createDataFrame(rows, "key string, value string").write.format("tidelog")
     .options(**options(broker, directory)).option("topic", "secured").mode("append").save())
    read = (spark.read.format("tidelog").options(**options(broker, directory)).option("subscribe", "secured")
            .load().selectExpr("CAST(value AS STRING) AS value").collect())
    assert sorted(r.value for r in read) == sorted(v for _, v in rows)


def test_a_wrong_password_fails_the_query_with_the_authentication_error(spark, secured):
    broker, directory = secured
    wrong = {**options(broker, directory), "kafka.sasl.jaas.config":
             'org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" password="guess";'}
    with pytest.raises(Exception, match="SASL authentication|SASL_AUTHENTICATION_FAILED|Invalid user credentials"):
        spark.read.format("tidelog").options(**wrong).option("subscribe", "secured").load().collect()
