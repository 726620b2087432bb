"""SASL credentials reach Kafka exactly as given: the JAAS config Weir writes is read back by
Kafka's own parser (kafka-clients, run on the JVM), whatever backslashes, quotes or line ends
the username and password hold."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyspark
import pytest

from spark_jobs import kafka
from spark_jobs.catalog import KafkaSource
from spark_jobs.jars import resolved_jars

pytestmark = pytest.mark.kafka
SEPARATOR = "\u0000"
# Reads NUL-separated `sasl.jaas.config` values on stdin and prints, for each, the username and
# password Kafka's client parses out of it (JaasContext is what a Kafka client itself calls).
JAAS_READER = """
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.security.JaasContext;

public class JaasReader {
    public static void main(String[] args) throws Exception {
        String input = new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        for (String text : input.split("\\u0000")) {
            var context = JaasContext.loadClientContext(Map.of("sasl.jaas.config", new Password(text)));
            var options = context.configurationEntries().get(0).getOptions();
            out.print(options.get("username") + "\\u0000" + options.get("password") + "\\u0000");
        }
    }
}
"""
CREDENTIALS = [
    ("weir", "s3cr3t"),
    ('svc"quoted"', 'pa"ss'),
    ("domain\\user", "a\\b\\n\\u0041"),       # backslashes Java would read as escapes
    ("user", "ends-with-backslash\\"),        # would escape the closing quote
    ("user", 'mixed\\"both'),
    ("user", "two\nlines\r\n"),
    ("ünïcødé", "; } { = 'single' spaces and tabs\t"),
]


def kafka_parses(configs: list[str], tmp_path: Path) -> list[tuple[str, str]]:
    """(username, password) as Kafka's client reads each JAAS config."""
    jars = [j for j in resolved_jars() if "kafka-clients" in Path(j).name]
    slf4j = sorted((Path(pyspark.__file__).parent / "jars").glob("slf4j-api-*.jar"))
    assert jars and slf4j, "kafka-clients or slf4j-api jar not found"
    source = tmp_path / "JaasReader.java"
    source.write_text(JAAS_READER)
    done = subprocess.run(["java", "-cp", ":".join([jars[0], str(slf4j[0])]), str(source)],
                          input=SEPARATOR.join(configs).encode(), capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    fields = done.stdout.decode().split(SEPARATOR)[:-1]
    return list(zip(fields[0::2], fields[1::2], strict=True))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_username_and_password_reach_kafka_unchanged(mechanism: str, tmp_path: Path) -> None:
    configs = []
    for user, password in CREDENTIALS:
        env = {"WEIR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "WEIR_KAFKA_SASL_MECHANISM": mechanism,
               "WEIR_KAFKA_SASL_USERNAME": user, "WEIR_KAFKA_SASL_PASSWORD": password}
        conn = kafka.connection(KafkaSource(topic="t", bootstrap_servers="k:9093"), env=env)
        configs.append(conn.spark_options()["kafka.sasl.jaas.config"])
        assert password not in repr(conn) + conn.describe()
    assert kafka_parses(configs, tmp_path) == CREDENTIALS
